"""The seccomp filter of the sandbox's children: a deny list per architecture as classic BPF.

Part of the worker (domains/sandbox/worker.py), standard library only; the worker script loads it
from its own folder. Wrong architecture -> the process is killed; a denied call -> EPERM; x32
calls on x86_64 -> EPERM; anything else is allowed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP = 38, 22

# Refused system calls (EPERM) per architecture: process creation and exec, sockets, signals to
# others, tracing, namespaces and mounts, limit/uid changes, timers (the CPU timer stays armed),
# kernel keyrings, BPF, io_uring, perf, module loading and friends.
_DENIED = {
    "x86_64": (0xC000003E, [
        56, 435, 57, 58, 59, 322, 41, 53, 42, 49, 50, 43, 288, 44, 46, 62, 200, 234, 129, 297,
        424, 434, 101, 310, 311, 272, 308, 165, 166, 155, 161, 160, 302, 135, 321, 298, 323, 425,
        426, 427, 250, 248, 249, 169, 38, 37, 222, 172, 173, 154, 133, 259, 304, 303, 246, 175,
        313, 176, 167, 168, 163, 103, 312, 428, 429, 430, 431, 432, 433, 442, 105, 106, 113, 114,
        117, 119, 116, 126]),
    "aarch64": (0xC00000B7, [
        220, 435, 221, 281, 198, 199, 203, 200, 201, 202, 242, 206, 211, 129, 130, 131, 138, 240,
        424, 434, 117, 270, 271, 97, 268, 40, 39, 41, 51, 164, 261, 92, 280, 241, 282, 425, 426,
        427, 219, 217, 218, 142, 103, 107, 33, 265, 264, 104, 105, 106, 273, 272, 267, 128, 116,
        428, 429, 430, 431, 432, 433, 442, 146, 144, 145, 143, 147, 149, 159, 91]),
}


_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_ALLOW, _EPERM, _KILL = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x80000000


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The BPF filter: wrong architecture -> kill; a denied call -> EPERM; else allow.

    The denied numbers are searched as a binary tree (about 10 instructions a call instead of
    one per denied number): the kernel runs the filter on every system call, and once per
    system call number when it is installed (its action cache), which each child does."""
    table = _DENIED.get(machine or os.uname().machine)
    if table is None:
        return None
    arch, denied = table
    code = [(_LD_ABS, 0, 0, 4), (_JEQ, 0, "kill", arch), (_LD_ABS, 0, 0, 0),
            (_JGE, "eperm", 0, 0x40000000)]  # x32 system calls on x86_64: refused
    code += _search_tree(sorted(set(denied)))
    labels = {"allow": len(code), "eperm": len(code) + 1, "kill": len(code) + 2}
    code += [(_RET, 0, 0, _ALLOW), (_RET, 0, 0, _EPERM), (_RET, 0, 0, _KILL)]
    resolved = []
    for index, (op, jt, jf, k) in enumerate(code):
        jt, jf = (labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp filter: a jump past 255 instructions")
        resolved.append(struct.pack("HBBI", op, jt, jf, k))
    return b"".join(resolved)


def _search_tree(numbers: list[int]) -> list[tuple]:
    """Instructions that jump to "eperm" when the loaded number is one of `numbers` (sorted)
    and to "allow" otherwise; relative jumps inside the tree, labels for its exits."""
    if len(numbers) <= 3:
        return [(_JEQ, "eperm", 0 if i + 1 < len(numbers) else "allow", nr)
                for i, nr in enumerate(numbers)]
    middle = len(numbers) // 2
    low, high = _search_tree(numbers[:middle]), _search_tree(numbers[middle:])
    return [(_JGE, len(low), 0, numbers[middle]), *low, *high]


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
