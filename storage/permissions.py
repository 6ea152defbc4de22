"""Checkpoint folders readable like any saved model: safetensors writes its weights file with mode
0600 and `tempfile.mkdtemp` makes 0700 folders, so another user (a serving process, a teammate
copying the model) could not read a checkpoint. `make_readable` gives the folder and its files
the modes the process's umask gives new files (0755 / 0644 under the usual 022).
"""

from __future__ import annotations

import os
from pathlib import Path


def process_umask() -> int:
    """The process's umask, read without changing it (os.umask would, for every thread);
    022 where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def make_readable(folder: Path) -> None:
    """chmod `folder`, its sub-folders (0777 & ~umask) and its files (0666 & ~umask)."""
    mask = process_umask()
    for root, _dirs, files in os.walk(folder):  # top-down: a folder before what is inside it
        os.chmod(root, 0o777 & ~mask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~mask)
