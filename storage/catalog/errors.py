"""Why a data root cannot be used: each error's message is one line naming the path and the fix,
which the `flywheel` command prints as is (exit status 2; 3 for `CatalogLocked`) wherever a
command opens the catalog (flows/cli.py `_Group`).

Light on purpose (no imports), so the CLI can tell these errors apart without loading DuckDB.
"""

from __future__ import annotations


class DataRootUnusable(ValueError):
    """The data root or its catalog cannot be used; the message says why and what to do."""


class DataRootFormatError(DataRootUnusable):
    """The data root was written in another data root format than this Flywheel reads and
    writes (storage/catalog/schema.py, `FORMAT_VERSION`); nothing was written to it.

    Parameters
    ----------
    data_root
        The data root.
    found
        The format its catalog records (1 for a catalog written before formats were recorded).
    expected
        The format this Flywheel reads and writes.
    """

    def __init__(self, data_root: object, found: int, expected: int):
        self.data_root, self.found, self.expected = data_root, found, expected
        who = "an earlier" if found < expected else "a newer"
        super().__init__(
            f"data root {data_root} is in data root format {found}, written by {who} Flywheel; "
            f"this Flywheel reads and writes only format {expected} (stage fingerprints and "
            f"dataset schemas differ), so it refuses to touch it: start with a new --data-root, "
            f"or rerun with {who} Flywheel to read it")


class CatalogDamaged(DataRootUnusable):
    """The catalog file cannot be read (truncated, overwritten, a corrupted block): the message
    names it, what DuckDB said and how to recover (storage/catalog/connection.py builds it)."""


class CatalogLocked(DataRootUnusable):
    """Another process held the catalog's lock for longer than the wait (the CLI exits 3, as for
    a locked run); the message names its pid when DuckDB reports one."""
