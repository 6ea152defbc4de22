"""The sandbox worker: a fork server that runs one untrusted program per forked child.

This file is started as a script (`python -S -P worker.py LIMITS_JSON ROOT FILTER_HEX`) by
`domains.sandbox.pool` and imports the standard library only (and jail.py, seccomp.py and
canonical.py from its own folder). FILTER_HEX is the seccomp filter the host compiled
(seccomp.py), as hex; empty for none. It is importable too: the host uses its outcomes and
modules, and `canonical` (canonical.py) writes both an answer and a program's output.

Start-up, once per worker (as root, or as root of a new user namespace; jail.py):

    unshare  mount, network, IPC, UTS and PID namespaces (no network device is brought up)
    mount    a size-capped tmpfs over the folder the host made; fork once: the child is PID 1 of
             the new PID namespace and serves, chrooted into that tmpfs (the host's files, the
             data root, the catalog and ~/.ssh are not in its world)
    limits   the rlimits every child inherits (address space, file size, open files, core
             size), no supplementary groups; then a fixed program of its own through the
             harness, so that children start with the compiler and encoder warm (`_warm_up`)

Per program, in a child forked from the server (copy-on-write: nothing a program changes survives
it): a fresh working folder owned by nobody (the server makes it before the fork and removes it
after); stdin/stdout/stderr on /dev/null, every other descriptor closed but the result pipe; uid
and gid 65534 (no capabilities); the inherited rlimits and its own on processes (0: no threads
either) and CPU time; a CPU timer; `PR_SET_NO_NEW_PRIVS` and the seccomp filter (seccomp.py): an
allow list of the few system calls a pure program needs, file lookups refused with EPERM, any
other call kills the child. Print output goes to a capped buffer, never to a descriptor.

Protocol (host <-> server, on the server's stdin/stdout): a 4-byte big-endian length and a JSON
body. The server first writes {"ready": true, "mechanisms": {name: "on" | "missing: why"}}; then
for each {"jobs": [{"source": str, "calls": [args_repr, ...]}]} it answers with one report per job,
each framed by its own 4-byte length: the JSON {"outcome": .., "outputs": [..], "stdout": ..,
"error": ..}. The child writes its report on its own pipe and the server passes it on unread; a
program can write to that pipe too, so the host checks every report (a dict with a known outcome
and text fields, else `crash`) and trusts nothing in it beyond "these are my outputs": it
compares them with what it expects.
"""

from __future__ import annotations

import builtins
import errno
import gc
import io
import json
import math
import os
import resource
import select
import signal
import struct
import sys
import time

try:  # imported by the host as domains.sandbox.worker
    from domains.sandbox.canonical import canonical
    from domains.sandbox.jail import isolate, open_libc, remove_tree, vm_size
    from domains.sandbox.seccomp import install_seccomp, seccomp_filter
except ModuleNotFoundError:  # run as the worker script (python -S -P worker.py): its own folder
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from canonical import canonical
    from jail import isolate, open_libc, remove_tree, vm_size
    from seccomp import install_seccomp, seccomp_filter

# Modules a program may import: pre-imported here, before the chroot (nothing else can be).
# (fractions, statistics and typing are left out: each pre-imported module makes every fork
# dearer, ~0.1 ms for decimal's.)
ALLOWED_MODULES = ("math", "itertools", "functools", "collections", "string", "re", "heapq",
                   "bisect", "operator", "random")
# Compiled in the server but executed on a program's first import, in its child: `random` run in
# the server would reseed itself in every forked child (its at-fork hook), ~40 copied pages each.
# Its compiled dependencies are imported in the server (nothing can be loaded after the chroot).
PRELOADED_MODULES = {"random": ("_random", "_sha512")}
OUTCOMES = ("ok", "timeout", "memory", "forbidden", "crash", "nondeterministic", "output_limit")
NOBODY = 65534


class OutputLimit(Exception):
    """The program printed, or returned, more than the output cap."""


_type, _len, _isinstance, _eval = type, len, isinstance, eval
_NO_BUILTINS = {"__builtins__": {}}  # argument tuples are literals the host has checked
_quote = json.encoder.encode_basestring_ascii


# ---- one program, in a forked child --------------------------------------------------------

class _CappedText(io.TextIOBase):
    """A print target that keeps at most `cap` characters and raises past it."""

    def __init__(self, cap: int) -> None:
        self.parts: list[str] = []
        self.size, self.cap, self.overflowed = 0, cap, False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.size += _len(text)
        if self.size > self.cap:
            self.overflowed = True
            raise OutputLimit(f"printed more than {self.cap} characters")
        self.parts.append(text)
        return _len(text)


def _confine(limits: dict, workdir: str, result_fd: int, devnull: int, state: dict) -> None:
    """Everything between fork and the program: descriptors, identity, limits, seccomp."""
    gc.disable()
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, 1 << 16)
    os.chdir(workdir)
    if state["drop_uid"]:
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # the server forks: set here, not there
    resource.setrlimit(resource.RLIMIT_CPU, (math.ceil(cpu), math.ceil(cpu) + 1))
    signal.setitimer(signal.ITIMER_PROF, cpu)  # SIGPROF's default action ends the program
    if state["seccomp"] is not None:
        install_seccomp(state["seccomp"])
    for name in state["ctypes_modules"]:
        del sys.modules[name]


def _classify(exc: BaseException, workdir: str) -> str:
    """The outcome of a program that raised `exc`."""
    if _isinstance(exc, OutputLimit):
        return "output_limit"
    if _isinstance(exc, MemoryError):
        return "memory"
    if _isinstance(exc, (PermissionError, ImportError)):
        return "forbidden"
    if _isinstance(exc, OSError):
        if exc.errno == errno.EFBIG:
            return "output_limit"
        names = [n for n in (exc.filename, getattr(exc, "filename2", None)) if n is not None]
        if exc.errno in (errno.EROFS, errno.EACCES) or any(
                not os.path.abspath(os.fsdecode(n)).startswith(workdir + os.sep) for n in names
                if _isinstance(n, (str, bytes))):
            return "forbidden"
    if _isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
        return "forbidden"
    if _isinstance(exc, ValueError) and "not allowed to raise" in str(exc):
        return "forbidden"  # setrlimit's EPERM
    return "crash"


def run_program(job: dict, limits: dict, printed: _CappedText) -> dict:
    """Compile and run one program in this (already confined) process; call `f` per input."""
    workdir = os.getcwd()
    # The real builtins: a program that patches them patches only this child, which exits after
    # it; the harness holds its own references to what it uses (`canonical` and the names below).
    namespace = {"__builtins__": builtins, "__name__": "__sandbox__"}
    sys.stdout = sys.stderr = printed
    try:
        exec(compile(job["source"], "<program>", "exec"), namespace)  # noqa: S102 (sandboxed)
        function = namespace.get("f")
        if not callable(function):
            return {"outcome": "crash", "error": "the program defines no function f"}
        outputs, size = [], 0
        for args in job["calls"]:
            text = canonical(function(*_eval(args, _NO_BUILTINS)))
            size += _len(text)
            if size > limits["max_output_bytes"]:
                raise OutputLimit(f"returned more than {limits['max_output_bytes']} characters")
            outputs.append(text)
    except BaseException as exc:  # noqa: BLE001 - every way a program can fail is an outcome
        outcome = "output_limit" if printed.overflowed else _classify(exc, workdir)
        return {"outcome": outcome, "error": f"{_type(exc).__name__}: {exc}"[:300]}
    if printed.overflowed:
        return {"outcome": "output_limit", "error": "printed past the cap"}
    return {"outcome": "ok", "outputs": outputs}


def _report(result: dict) -> bytes:
    """The JSON of a report: strings through the C encoder, no encoder object built per child."""
    parts = [f'"{key}": [{", ".join(map(_quote, value))}]' if _isinstance(value, list)
             else f'"{key}": {_quote(value)}' for key, value in result.items()]
    return ("{" + ", ".join(parts) + "}").encode()


def _child(job: dict, limits: dict, workdir: str, write_fd: int, devnull: int,
           state: dict) -> None:
    """The forked child: confine, run, report on `write_fd`, exit without cleanup."""
    try:
        _confine(limits, workdir, write_fd, devnull, state)
        printed = _CappedText(limits["max_output_bytes"])
        result = run_program(job, limits, printed)
        result["stdout"] = "".join(printed.parts)
        data = _report(result)
        if _len(data) > limits["max_output_bytes"] * 4 + 1024:
            data = json.dumps({"outcome": "output_limit", "error": "result too large"}).encode()
        os.write(write_fd, data)
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(write_fd, json.dumps({"outcome": "crash", "error": repr(exc)[:300]}).encode())
        except BaseException:  # noqa: BLE001
            pass
    os._exit(0)


def _outcome_of_status(status: int, usage, limits: dict, killed: str | None) -> dict:
    """The outcome of a child that left no (valid) report, from how it ended."""
    if killed:
        return {"outcome": killed, "error": f"killed by the server: {killed}"}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        cpu = usage.ru_utime + usage.ru_stime
        if sig in (signal.SIGPROF, signal.SIGXCPU) or (sig == signal.SIGKILL
                                                       and cpu >= limits["cpu_seconds"]):
            return {"outcome": "timeout", "error": f"CPU limit ({name})"}
        if sig == signal.SIGXFSZ:
            return {"outcome": "output_limit", "error": "file size limit"}
        if sig == signal.SIGSYS:
            return {"outcome": "forbidden", "error": "system call refused (SIGSYS)"}
        return {"outcome": "crash", "error": f"killed by {name}"}
    return {"outcome": "crash", "error": f"exited with {os.waitstatus_to_exitcode(status)} "
                                         "without a result"}


def _collect(pid: int, read_fd: int, limits: dict) -> tuple[bytes, int, object, str | None]:
    """Read the child's report until it exits, killing it past the wall clock or output cap."""
    pidfd = os.pidfd_open(pid)
    chunks, size, killed, exited = [], 0, None, False
    deadline = time.monotonic() + limits["wall_seconds"]
    cap = limits["max_output_bytes"] * 4 + 4096
    open_fds = [read_fd, pidfd]
    while not exited:
        left = deadline - time.monotonic()
        ready = select.select(open_fds, [], [], max(left, 0))[0] if left > 0 else []
        if not ready:
            killed = "timeout"
        for fd in ready:
            if fd == pidfd:
                exited = True
                continue
            data = os.read(read_fd, 65536)
            if not data:
                open_fds.remove(read_fd)
            chunks.append(data)
            size += _len(data)
            if size > cap:
                killed = "output_limit"
        if killed:
            os.kill(pid, signal.SIGKILL)
            break
    _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    while not killed and read_fd in open_fds and (data := os.read(read_fd, 65536)):
        chunks.append(data)
    return b"".join(chunks), status, usage, killed


def run_job(job: dict, limits: dict, state: dict, index: int) -> bytes:
    """Fork one child for `job` in a fresh working folder, wait for it, clean up after it.
    Returns the child's report as it wrote it (the host checks it: domains/sandbox/pool.py), or
    the server's own when the child left none or was killed."""
    workdir = os.path.join(state["base"], str(index))
    try:
        os.mkdir(workdir, 0o700)
        if state["drop_uid"]:
            os.chown(workdir, NOBODY, NOBODY)
    except OSError as exc:  # the tmpfs is full of what earlier programs left
        return json.dumps({"outcome": "crash", "error": f"no working folder: {exc}"}).encode()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(job, limits, workdir, write_fd, state["devnull"], state)
    os.close(write_fd)
    try:
        data, status, usage, killed = _collect(pid, read_fd, limits)
    finally:
        os.close(read_fd)
        try:
            os.rmdir(workdir)  # the common case: the program left nothing behind
        except OSError:
            remove_tree(workdir)
    if data and not killed and os.WIFEXITED(status):
        return data
    return json.dumps(_outcome_of_status(status, usage, limits, killed)).encode()


# ---- the server ----------------------------------------------------------------------------

def _read_message(stream) -> dict | None:
    header = stream.read(4)
    if len(header) < 4:
        return None
    (size,) = struct.unpack(">I", header)
    return json.loads(stream.read(size))


def _write_message(stream, message: dict | None = None, reports: list[bytes] = ()) -> None:
    """A JSON message, or the reports of a batch, each framed by its own length (a report cannot
    reach into its neighbour's)."""
    body = json.dumps(message).encode() if message is not None else b"".join(
        struct.pack(">I", len(report)) + report for report in reports)
    stream.write(struct.pack(">I", len(body)) + body)
    stream.flush()


def _warm_up(limits: dict) -> None:
    """Walk a child's path once in the server, on a fixed program of its own: the parser, the
    compiler, the allocator's free lists and the JSON encoder then start warm in every forked
    child, which shares them instead of building them again on pages it must copy (a first
    `compile` in a child costs ~200 copied pages, ~1 ms here; after this, ~70)."""
    printed = _CappedText(limits["max_output_bytes"])
    namespace = {"__builtins__": builtins, "__name__": "__warm_up__", "out": printed}
    source = "def f(x, s):\n    print(x, file=out)\n    return [x * 3 + 1, {s: (x,)}]"
    exec(compile(source, "<program>", "exec"), namespace)  # noqa: S102 (a fixed program)
    outputs = [canonical(namespace["f"](*_eval(args, _NO_BUILTINS)))
               for args in ("(4, 'a')", "(5, 'b')")]
    report = {"outcome": "ok", "outputs": outputs, "stdout": "".join(printed.parts), "error": ""}
    json.loads(json.dumps(report))


def _inherited_limits(state: dict, limits: dict) -> None:
    """What every child inherits, set once in the server instead of in each child (each costs a
    child copied pages): the address-space, file-size and open-file limits (the server itself
    stays far below them and writes no files), no core dumps, SIGXFSZ ignored (a too-large
    write fails with EFBIG instead), no supplementary groups. A child sets the process and CPU
    limits itself (the server forks, and CPU time counts from the fork)."""
    for name, value in ((resource.RLIMIT_AS, state["address_space"]),
                        (resource.RLIMIT_FSIZE, limits["max_file_bytes"]),
                        (resource.RLIMIT_NOFILE, 16), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(name, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if state["drop_uid"]:
        os.setgroups([])
    state["ctypes_modules"] = [m for m in sys.modules if m.split(".")[0] in ("ctypes", "_ctypes")]


class _Preloaded:
    """A meta-path finder and loader for `PRELOADED_MODULES`: their code is compiled in the server
    (before the chroot) and executed when a program first imports them."""

    def __init__(self, names: dict[str, tuple[str, ...]]) -> None:
        from importlib.machinery import ModuleSpec, PathFinder

        self.spec, self.code = ModuleSpec, {}
        for name, dependencies in names.items():
            for dependency in dependencies:
                __import__(dependency)
            found = PathFinder.find_spec(name)
            self.code[name] = found.loader.get_code(name)

    def find_spec(self, name: str, path: object = None, target: object = None):
        return self.spec(name, self, origin="preloaded") if name in self.code else None

    def create_module(self, spec) -> None:
        return None

    def exec_module(self, module) -> None:
        exec(self.code[module.__name__], module.__dict__)  # noqa: S102 (the standard library's)


def serve(limits: dict, root: str, program: bytes) -> None:
    """Isolate, report readiness, then run batches of jobs until stdin closes; every child
    installs the seccomp filter `program` (classic BPF; none when empty)."""
    for name in ALLOWED_MODULES:
        if name not in PRELOADED_MODULES:
            __import__(name)
    sys.meta_path.insert(0, _Preloaded(PRELOADED_MODULES))
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    devnull = os.open(os.devnull, os.O_RDWR)
    address_space = vm_size() + limits["memory_mb"] * 1024 * 1024
    mechanisms = {"seccomp": "on" if program else "missing: the host gave no filter",
                  **isolate(root, limits)}
    jailed = mechanisms["filesystem"] == "on"
    state = {"base": "/w" if jailed else os.path.join(root, "w"), "devnull": devnull,
             "drop_uid": mechanisms["uid_drop"] == "on",
             "seccomp": seccomp_filter(open_libc(), program) if program else None,
             "address_space": address_space}
    _inherited_limits(state, limits)
    _warm_up(limits)
    gc.collect()
    gc.freeze()  # forked children share these objects; the collector never touches them
    os.environ.clear()
    _write_message(outbox, {"ready": True, "mechanisms": mechanisms})
    counter = 0
    while (message := _read_message(inbox)) is not None:
        reports = []
        for job in message["jobs"]:
            counter += 1
            reports.append(run_job(job, limits, state, counter))
        _write_message(outbox, reports=reports)


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]), sys.argv[2], bytes.fromhex(sys.argv[3]))
