"""The seccomp filter of the sandbox's children: an allow list, compiled by libseccomp.

Two halves, for two processes. The host (domains/sandbox/pool.py) compiles the filter once with
libseccomp, through the `pyseccomp` binding to the system's libseccomp.so.2
(`allow_list_program`: classic BPF bytes). The worker (worker.py, standard library only, which
loads this file from its own folder and never imports pyseccomp) installs those bytes in every
forked child with prctl (`seccomp_filter`, `install_seccomp`).

What the filter does with a system call, by class (docs/sandbox.md says how each list was
measured, and how to measure it again: `python bench/sandbox.py --syscalls`):

    ALLOWED       allowed: what a child calls to run a pure-Python program and report on it
    FILE_LOOKUPS  EPERM: CPython looks for files by itself on paths a pure program reaches (a
                  warning's source line, a codec's module) and takes any OSError as "not there";
                  killing would turn a SyntaxWarning into "forbidden". A program's own open() or
                  os.stat() gets PermissionError, reported as "forbidden"
    anything else KILL_PROCESS, the default: no measured program makes these calls, so one that
                  does is doing what a pure function does not. It ends at its first such call
                  (it cannot catch it, retry or probe which calls are open) and the server
                  reports "forbidden" (SIGSYS). This covers every call a newer kernel adds
    another architecture's calls (x86's int 0x80, x32): KILL_PROCESS too
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 38, 22

# Allowed, each with why; measured on x86_64 (strace -f of the children on the ordinary workloads,
# tests/sandbox/corpus.py ORDINARY and the python_io generator's programs), except clock_gettime.
ALLOWED = {
    "brk": "memory: glibc's malloc (main arena)",
    "mmap": "memory: obmalloc's arenas and large blocks; a MemoryError is its ENOMEM",
    "munmap": "memory: freeing them",
    "mremap": "memory: realloc of a large block (a growing list or string)",
    "getrandom": "random's seed when a program first imports it",
    "getcwd": "the harness: run_program's working folder, _classify's paths",
    "write": "the harness: the report on the result pipe",
    "exit_group": "the harness: os._exit at the end of the child",
    # Not seen by strace: the vDSO answers it without a system call on this machine. CPython's
    # lock acquire reads CLOCK_MONOTONIC (an import takes the import lock; seen with gdb), and
    # on a machine whose clock source has no vDSO that is a real call.
    "clock_gettime": "CPython's locks (the import lock) read the monotonic clock",
}
# Refused with EPERM: openat and newfstatat measured (a SyntaxWarning at compile, re's
# FutureWarning, an unknown codec); the others are the same lookups on other glibc versions.
FILE_LOOKUPS = ("open", "openat", "stat", "lstat", "fstat", "newfstatat", "statx")

ARCHITECTURES = {"x86_64": "X86_64", "aarch64": "AARCH64"}  # machine -> pyseccomp.Arch name


class FilterUnavailable(RuntimeError):
    """The allow list cannot be compiled here (no libseccomp, or an unsupported machine)."""


@functools.cache
def allow_list_program(machine: str | None = None) -> bytes:
    """The classic-BPF program of the allow list for `machine` (default: this one's).

    libseccomp lays the calls out as a binary search tree (SCMP_FLTATR_CTL_OPTIMIZE = 2): the
    kernel runs the filter once per system call number when a child installs it (to fill its
    action cache: every allowed call is then free), and on each refused or killed call.

    Raises
    ------
    FilterUnavailable
        pyseccomp or the system's libseccomp.so.2 is missing or too old, or `machine` has no
        allow list.
    """
    machine = machine or os.uname().machine
    if machine not in ARCHITECTURES:
        msg = (f"no measured allow list for {machine} (known: {', '.join(ARCHITECTURES)}); "
               "measure one with bench/sandbox.py --syscalls")
        raise FilterUnavailable(msg)
    try:
        import pyseccomp
    except (ImportError, RuntimeError) as exc:  # pyseccomp raises RuntimeError without the .so
        msg = (f"libseccomp is not usable ({exc}): install the system's libseccomp2 "
               "(apt-get install libseccomp2) and the pyseccomp package (pip install -e .)")
        raise FilterUnavailable(msg) from None
    try:
        return _compile(pyseccomp, getattr(pyseccomp.Arch, ARCHITECTURES[machine]))
    except OSError as exc:  # e.g. a libseccomp older than 2.5 (no CTL_OPTIMIZE)
        msg = f"libseccomp could not compile the allow list ({exc}); it needs libseccomp >= 2.5"
        raise FilterUnavailable(msg) from None


def _compile(pyseccomp, target: int) -> bytes:
    import tempfile  # here, not at the top: it imports random, which the worker must not

    rules = pyseccomp.SyscallFilter(pyseccomp.KILL_PROCESS)
    rules.set_attr(pyseccomp.Attr.ACT_BADARCH, pyseccomp.KILL_PROCESS)
    rules.set_attr(pyseccomp.Attr.CTL_OPTIMIZE, 2)
    if target != pyseccomp.system_arch():
        rules.add_arch(target)
        rules.remove_arch(pyseccomp.Arch.NATIVE)
    for name in ALLOWED:
        rules.add_rule(pyseccomp.ALLOW, name)  # by name: libseccomp maps it per architecture
    for name in FILE_LOOKUPS:
        rules.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return handle.read()

def seccomp_filter(libc, program: bytes):
    """The `sock_fprog` of `program`, built once in the server; a forked child reuses it (its
    buffers sit at the same addresses in the copy)."""
    buffer = ctypes.create_string_buffer(program)
    fprog = ctypes.create_string_buffer(struct.pack("HL", len(program) // 8,
                                                    ctypes.addressof(buffer)))
    return libc.prctl, buffer, fprog


def install_seccomp(prepared) -> None:
    prctl, _, fprog = prepared
    for args in ((_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), (_PR_SET_SECCOMP, 2, fprog, 0, 0)):
        if prctl(*args) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
