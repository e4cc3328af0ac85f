"""Writing the server's files into a sandbox's work directory without following its links.

The work directory is the sandbox's: between two execs it may hold whatever an earlier
command left there, symbolic links included. The server (root, often) writes files there
by name (the ``code`` environment's ``solution.py`` and ``_runner.py``, on every call); by
plain path, a link ``solution.py -> /etc/cron.d/x`` left by the model's code would make the
server write the model's text to a host file. So every step here is relative to an open
directory and refuses to follow a link: a link in place of a folder is an error naming the
path, a link (or anything) in place of the file is replaced by the server's file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_inside(
    work_dir: Path, parts: Sequence[str], data: bytes, owner: tuple[int, int], name: str
) -> None:
    """Write ``data`` at ``work_dir/<parts>``, creating folders, all owned by ``owner``.

    ValueError names ``name`` when a folder on the way is not a real folder (a link).
    """
    with _folder(work_dir, parts[:-1], owner, name) as parent:
        leaf = parts[-1]
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(leaf, dir_fd=parent)  # whatever the sandbox left there, links included
        try:
            fd = os.open(leaf, _FILE_FLAGS, 0o644, dir_fd=parent)
        except (FileExistsError, IsADirectoryError):
            raise ValueError(f"file path {name!r} is a folder in the work directory") from None
        try:
            os.fchown(fd, *owner)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


@contextlib.contextmanager
def _folder(
    work_dir: Path, parts: Sequence[str], owner: tuple[int, int], name: str
) -> Iterator[int]:
    """An open descriptor of ``work_dir/<parts>``, each folder made if missing, none a link."""
    fd = os.open(work_dir, _DIR_FLAGS)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
                os.chown(part, *owner, dir_fd=fd, follow_symlinks=False)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise ValueError(
                    f"file path {name!r}: {part!r} in the work directory is not a folder "
                    f"({exc.strerror})"
                ) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)
