"""Process lifetimes: a helper process (the run's Prefect server, a training launcher and its
workers) that must not outlive the process that started it, however that one dies."""

from __future__ import annotations

import os
import signal
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with(parent: int, sig: signal.Signals, *, gone_status: int = 1) -> None:
    """Have the kernel send `sig` to this process when `parent` dies (Linux `PR_SET_PDEATHSIG`);
    exit with `gone_status` at once if `parent` is already gone (the signal would never come)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != parent:
        sys.exit(gone_status)
