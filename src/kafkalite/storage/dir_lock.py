"""Who may write a directory: an `flock` on its `.lock` file, with the holder's identity written inside.

Two writers on one partition directory destroy each other's files: the second one's close trims
the index files the first has mapped, and the first dies of SIGBUS on its next index write. So
every writer takes a lock first, and fails with the lock file and the holder's name otherwise:

- a `LogManager` (a broker) holds `<data dir>/.lock` exclusively, as Kafka does;
- a standalone `Log` holds `<its parent>/.lock` shared (so it cannot run beside a manager of that
  data dir, while standalone Logs of different partitions can share the dir) and
  `<partition dir>/.lock` exclusively (so two standalone writers of one partition conflict);
- a `Log` opened by a manager is handed the manager's lock as proof and takes nothing more;
- read-only readers take no lock (they never change a file).

flock locks belong to an open file description, not to a process, so two opens in one process
conflict just as two processes do, which is what lets a manager and a standalone Log in the same
process notice each other.

Kafka leaves `.lock` empty and never reads it; an exclusive holder here writes one line
(`pid N on host H (command: ...)`) into it and empties it again on release, so that the error a
second writer gets can say who holds the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
from pathlib import Path

from kafkalite.errors import DirectoryLockedError

LOCK_FILE = ".lock"
_MAX_HOLDER_BYTES = 512


def holder_identity() -> str:
    """One line naming this process: what a second writer will be told."""
    argv = getattr(sys, "orig_argv", None) or sys.argv  # orig_argv keeps `python -m module`
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)) or "python"
    return f"pid {os.getpid()} on host {socket.gethostname()} (command: {command[:200]})"


def read_holder(lock_file: Path) -> str | None:
    """What the holder of `lock_file` wrote into it, or None (empty, unreadable, or a Kafka lock)."""
    try:
        with open(lock_file, "rb") as f:
            text = f.read(_MAX_HOLDER_BYTES).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def locked_files() -> set[tuple[int, int]] | None:
    """(device, inode) of every file some process holds a lock on, from /proc/locks: observed without
    taking a lock (even a shared probe would make a writer that starts at that instant fail).
    None when it cannot be told (no /proc); this only serves error messages."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return None
    held = set()
    for line in table.splitlines():
        for field in line.split():
            parts = field.split(":")
            if len(parts) == 3:
                with contextlib.suppress(ValueError):
                    held.add((os.makedev(int(parts[0], 16), int(parts[1], 16)), int(parts[2])))
                break
    return held


def _is_held(path: Path, held: set[tuple[int, int]]) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in held


class DirLock:
    """A held lock on `<directory>/.lock`; `release()` (idempotent) gives it up."""

    def __init__(self, directory: Path, fd: int, exclusive: bool) -> None:
        self.directory = directory
        self.path = directory / LOCK_FILE
        self.exclusive = exclusive
        self._fd = fd

    @classmethod
    def acquire(cls, directory: Path | str, *, exclusive: bool, what: str) -> DirLock:
        """Lock `directory` (which must exist) or raise DirectoryLockedError naming the lock and holder.

        `what` says who is asking, for the message ("log dir", "partition directory" ...).
        """
        directory = Path(directory).resolve()
        lock_file = directory / LOCK_FILE
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise locked_error(lock_file, what) from None
        except BaseException:
            os.close(fd)
            raise
        if exclusive:
            data = (holder_identity() + "\n").encode()
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            except OSError:  # a read-only file system still locks; the name is only a courtesy
                pass
        return cls(directory, fd, exclusive)

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        fd = self._fd
        if fd < 0:
            return
        self._fd = -1
        try:
            if self.exclusive:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)  # an empty .lock again, as Kafka leaves it
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"DirLock({self.path}, {'exclusive' if self.exclusive else 'shared'}, held={self.held})"


def locked_error(lock_file: Path, what: str) -> DirectoryLockedError:
    """The error for a lock someone else holds, naming them as well as the lock file can tell.

    An exclusive holder has written its identity into the file. Shared holders (standalone Logs in
    a data dir) write into their partition's `.lock`, so those are looked at too.
    """
    holders = []
    own = read_holder(lock_file)
    if own is not None:
        holders.append(own)
    held = locked_files() or set()  # unknown (no /proc) reads as nothing held
    try:
        children = sorted(p for p in lock_file.parent.iterdir() if p.is_dir()) if held else []
    except OSError:
        children = []
    for child in children:
        child_lock = child / LOCK_FILE
        if _is_held(child_lock, held):
            holders.append(f"{read_holder(child_lock) or 'an unnamed process'} (a Log writing {child.name})")
    if holders:
        who = "; ".join(holders)
        message = f"cannot open {what} {lock_file.parent} for writing: {lock_file} is held by {who}"
    else:
        message = (f"cannot open {what} {lock_file.parent} for writing: {lock_file} is held by another process "
                   "that did not record itself (a Kafka broker, or a process that is just starting)")
    message += "; stop it, or open the log read-only (Log.open_read_only) to only read"
    return DirectoryLockedError(message, str(lock_file), "; ".join(holders) or None)


class DelegatedLock(DirLock):
    """Proof carried by a worker process acting for the holder of `<directory>/.lock` (the manager's recovery
    workers, `manager.recovery_workers`): it holds nothing itself. The holder keeps its exclusive lock while
    the worker runs and touches none of the worker's partitions until the worker has answered for them."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, -1, True)

    @property
    def held(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing to release: the holder's lock is the holder's."""
