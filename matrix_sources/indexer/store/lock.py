"""One writer per data dir: the service, or one command that writes the collection.

Embedded Chroma and the pipeline's cursors assume a single writer (DESIGN.md, "Stores
and who writes them"). `run`, `import`, `backfill`, `ref add|sync|rm` and repairing
`verify --index` hold an exclusive lock on DATA_DIR/writer.lock; a second one is
refused with what to do instead. The lock is released when the process exits, even by
SIGKILL, so a crash never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path


def holder_name(what: str) -> str:
    """The command this process really is (`matrix-sources demo` runs the service too):
    the console script's subcommand from argv (never its arguments); `what` when the
    program is something else (tests, `python -m`)."""
    argv = sys.argv
    if Path(argv[0]).name != "matrix-sources" or len(argv) < 2 or argv[1].startswith("-"):
        return what
    words = argv[1:3] if argv[1] in ("ref", "allowlist") and len(argv) > 2 else argv[1:2]
    return " ".join(["matrix-sources", *words])


class LockedError(RuntimeError):
    pass


class WriterLock:
    def __init__(self, data_dir: Path, what: str) -> None:
        self.path = Path(data_dir) / "writer.lock"
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> WriterLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockedError(
                f"{self.path.parent} is in use by {holder}; {self.what} needs it alone. "
                "Stop the service first (it backfills and indexes on its own while it "
                "runs), or use Chroma as a server for tools beside it."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{holder_name(self.what)} (pid {os.getpid()})".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(data_dir: Path) -> str | None:
    """Who holds the data dir's writer lock now ("matrix-sources run (pid 12)"), or None
    when nobody does: how `matrix-sources search` knows a service runs. Creates nothing;
    the shared lock it tries is released at once."""
    try:
        fd = os.open(Path(data_dir) / "writer.lock", os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.read(fd, 200).decode(errors="replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
