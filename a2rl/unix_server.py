"""`PrivateUnixServer`: a threading server on a Unix socket only its owner can connect to
(`private_unix_socket`: such a socket for an event loop's server).

Used by the grading API (`a2rl_recorder.server`) and the driver gateway (`a2rl_gateway.http1`),
whose sockets the local sandbox relays to the agent. The socket file is created with mode 0600
(the descriptor is chmodded before `bind`, which Linux honours), a stale socket at the path is
replaced while any other file there is an error (`FileExistsError`), and `server_close` removes
the file only while it is still the socket this server bound.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import socketserver
import stat
from pathlib import Path


class PrivateUnixServer(socketserver.ThreadingUnixStreamServer):
    def __init__(self, path: Path, handler: type[socketserver.BaseRequestHandler]) -> None:
        self.path = path
        remove_stale_socket(path)
        super().__init__(str(path), handler, bind_and_activate=False)
        try:
            os.fchmod(self.socket.fileno(), 0o600)  # Linux creates the socket file with this mode
            self.server_bind()
            self._inode = os.stat(path).st_ino
            os.chmod(path, 0o600)
            self.server_activate()
        except BaseException:
            self.server_close()
            raise

    def server_close(self) -> None:
        super().server_close()
        remove_bound_socket(self.path, getattr(self, "_inode", None))


def private_unix_socket(path: Path) -> tuple[socket.socket, int]:
    """A Unix stream socket bound at `path` as `PrivateUnixServer` binds its own (not listening yet),
    and the inode of its file (for `remove_bound_socket`)."""
    remove_stale_socket(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.fchmod(sock.fileno(), 0o600)
        sock.bind(str(path))
        inode = os.stat(path).st_ino
        os.chmod(path, 0o600)
    except BaseException:
        sock.close()
        raise
    return sock, inode


def remove_bound_socket(path: Path, inode: int | None) -> None:
    """Remove the socket file at `path` while it is still the one bound with `inode`."""
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == inode:
            path.unlink()


def remove_stale_socket(path: Path) -> None:
    """Remove a socket left at `path`; `FileExistsError` when something else is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(errno.EEXIST, "exists and is not a socket", str(path))
    path.unlink()
