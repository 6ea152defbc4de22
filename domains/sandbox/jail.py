"""The worker's jail: namespaces, a size-capped tmpfs root, chroot and PID 1, set up once per
worker (`isolate`), and the removal of what a program left in its folder (`remove_tree`).

Part of the worker (domains/sandbox/worker.py), standard library only; the worker script loads it
from its own folder. docs/sandbox.md "How it works" describes each mechanism.
"""

from __future__ import annotations

import ctypes
import os
import signal

_CLONE_NEWNS, _CLONE_NEWUTS, _CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 0x40000
_PR_SET_PDEATHSIG = 1


def open_libc():
    return ctypes.CDLL(None, use_errno=True)


def _call(fn, *args) -> None:
    if fn(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _unshare(libc) -> dict[str, str]:
    """Enter new namespaces (a user namespace too when not root) -> mechanism -> state."""
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS | _CLONE_NEWPID
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= _CLONE_NEWUSER
    try:
        _call(libc.unshare, flags)
    except OSError as exc:
        why = f"missing: unshare failed ({exc.strerror}); run as root or allow user namespaces"
        return {name: why for name in ("mount_namespace", "network_namespace", "pid_namespace")}
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
    return {"mount_namespace": "on", "network_namespace": "on", "pid_namespace": "on"}


def _mount_root(libc, root: str, size_mb: int) -> str:
    """A private, size-capped tmpfs over `root` (the chroot of the serving process)."""
    _call(libc.mount, None, b"/", None, _MS_REC | _MS_PRIVATE, None)
    options = f"size={size_mb}m,mode=755".encode()
    _call(libc.mount, b"tmpfs", root.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options)
    os.mkdir(os.path.join(root, "w"), 0o711)
    return "on"


def vm_size() -> int:
    """This process's address-space size: a child's RLIMIT_AS is it plus `memory_mb`."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def isolate(root: str, limits: dict) -> dict[str, str]:
    """Namespaces, the tmpfs root and PID 1; returns what is on and what is missing and why.

    The calling process forks once after `unshare`: the parent waits for its child and exits
    with its status; the child (PID 1 of the new PID namespace) returns and serves, chrooted."""
    mechanisms: dict[str, str] = {}
    if os.geteuid() != 0 and not os.path.exists("/proc/self/uid_map"):
        mechanisms["uid_drop"] = "missing: not root and no user namespaces"
    libc = open_libc()
    mechanisms.update(_unshare(libc))
    jailed = mechanisms["mount_namespace"] == "on"
    if jailed:
        mechanisms["filesystem"] = _mount_root(libc, root, limits["tmpfs_mb"])
        pid = os.fork()
        if pid:
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.chroot(root)
        os.chdir("/")
    else:
        mechanisms["filesystem"] = "missing: no mount namespace, programs see the host's files"
        os.makedirs(os.path.join(root, "w"), exist_ok=True)
    mechanisms.setdefault("uid_drop", "on" if os.geteuid() == 0 else
                          "missing: only uid 0 is mapped in the user namespace")
    mechanisms["rlimits"] = "on"
    return mechanisms


def remove_tree(path: str) -> None:
    """Remove what a (dead) program left in its folder, as far as it can: depth first, by
    changing into each folder (no recursion and no long paths, however deep the program nested
    its folders), removing links and never following them. Under the seccomp filter a program
    can create nothing (file calls are refused); this is for a worker without it ("warn")."""
    names: list[str] = []
    try:
        os.chdir(path)
        while True:
            entries = os.listdir(".")
            inner = next((e for e in entries if os.path.isdir(e) and not os.path.islink(e)), None)
            if inner is not None:
                os.chdir(inner)
                names.append(inner)
                continue
            for entry in entries:
                os.unlink(entry)
            if not names:
                break
            os.chdir("..")
            os.rmdir(names.pop())
        os.chdir("/")
        os.rmdir(path)
    except OSError:
        pass
    finally:
        os.chdir("/")

