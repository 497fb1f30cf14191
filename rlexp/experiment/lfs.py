"""Git LFS pointers: what a clone made without ``git lfs pull`` holds in place of a large file.

A pointer is a short text file (``version https://git-lfs.github.com/spec/v1``, ``oid sha256:…``,
``size N``); read as a log, an eval file or JSON it gives "format not recognised" or "malformed
JSON", which names the wrong cause. Every reader of other people's files calls
:func:`refuse_lfs_pointer` first.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlexp.errors import InputError

LFS_SPEC = b"version https://git-lfs.github.com/spec/v1"
_SIZE = re.compile(rb"^size (\d+)\s*$", re.MULTILINE)


def lfs_pointer_size(head: bytes) -> int | None:
    """The size of the real file when ``head`` (a file's first bytes) is a Git LFS pointer, else None
    (-1 for a pointer without a size line)."""
    if not head.lstrip().startswith(LFS_SPEC):
        return None
    m = _SIZE.search(head)
    return int(m.group(1)) if m else -1


def refuse_lfs_pointer(path: str | Path) -> None:
    """An :class:`InputError` naming ``path`` as a Git LFS pointer, with the command that fetches it."""
    from rlexp.experiment.files import check_regular_file

    path = check_regular_file(path)  # a FIFO or a device would block here, before any reader's own check
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except OSError:
        return  # not readable here: the reader's own check names it
    size = lfs_pointer_size(head)
    if size is not None:
        real = f" of a {size}-byte file" if size >= 0 else ""
        raise InputError(path, None, f"a Git LFS pointer{real}, not the file itself: run `git lfs pull` "
                         "in its repository (or `git lfs pull --include <path>`) and read it again")
