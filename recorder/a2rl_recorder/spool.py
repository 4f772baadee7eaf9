"""`SpoolingStore`: writes that survive an unreachable object store.

The recorder wraps its store in a `SpoolingStore`. While the store answers, every call goes
straight through (no copy, no overhead beyond a lock). When a write fails because the store is
unreachable (connection refused or reset, timeouts, HTTP 5xx), the object is written to a local
spool directory instead and a background thread uploads it, retrying with exponential backoff
bounded by `max_backoff_s`. Nothing is lost: a spooled object stays on disk until the store
confirmed it, and a recorder restarted on the same spool directory picks up where it stopped.

Order is kept: once anything is spooled, later writes queue behind it until the spool is empty,
so a manifest never reaches the store before the blobs it lists. Reads see spooled objects
(read-your-writes). `mark()` + `wait_flushed(mark, timeout)` let a caller wait until everything
written so far has reached the store — the recorder does that before an evaluation starts.

Spool files: `<seq>.json` (the operation: key, put/delete, sha256) and `<seq>.data` (the bytes),
`<seq>` a zero-padded sequence number; a `.tmp` file is an unfinished write and is discarded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from a2rl.errors import A2rlError, NotFoundError
from a2rl.store.base import ObjectStore, Reader, copy_verified
from a2rl.store.local import ContentChangedError, check_key, check_prefix

log = logging.getLogger(__name__)

COPY_CHUNK = 1 << 20
DEFAULT_MIN_BACKOFF_S = 0.5
DEFAULT_MAX_BACKOFF_S = 10.0
# S3 error codes that mean "try again later", not "this request is wrong".
TRANSIENT_S3_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "XMinioServerNotInitialized",
        "XMinioStorageFull",
    }
)


def is_transient(exc: BaseException) -> bool:
    """True when `exc` says the store could not be reached or is temporarily failing.

    A missing object, a file that changed while it was read, a bad key or a refused permission
    are not transient: spooling them would only delay the same error. Local filesystem errors
    (`OSError` other than connection problems) are not spooled either: the spool is on local disk.
    """
    if isinstance(exc, NotFoundError | ContentChangedError | ValueError):
        return False
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    try:
        import urllib3.exceptions
        from minio.error import InvalidResponseError, S3Error, ServerError
    except ImportError:  # pragma: no cover - both ship with a2rl
        return False
    if isinstance(exc, urllib3.exceptions.HTTPError | ServerError | InvalidResponseError):
        return True
    return isinstance(exc, S3Error) and exc.code in TRANSIENT_S3_CODES


@dataclass(frozen=True)
class _Op:
    seq: int
    key: str
    kind: str  # "put" or "delete"
    sha256: str | None = None


class SpoolingStore(ObjectStore):
    def __init__(
        self,
        inner: ObjectStore,
        spool_dir: Path,
        *,
        min_backoff_s: float = DEFAULT_MIN_BACKOFF_S,
        max_backoff_s: float = DEFAULT_MAX_BACKOFF_S,
    ) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.spool_dir = Path(spool_dir)
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max(min_backoff_s, max_backoff_s)
        self._cond = threading.Condition()
        self._queue: list[_Op] = []
        self._latest: dict[str, _Op] = {}  # newest queued operation per key
        self._next_seq = 1
        self._store_down = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self.spooled_total = 0  # objects ever spooled (for logs and tests)
        self.last_error: str | None = None
        self._recover()

    # --- spool files ------------------------------------------------------------------------

    def _meta(self, seq: int) -> Path:
        return self.spool_dir / f"{seq:012d}.json"

    def _data(self, seq: int) -> Path:
        return self.spool_dir / f"{seq:012d}.data"

    def _recover(self) -> None:
        """Queue what a previous recorder left in the spool directory (oldest first)."""
        if not self.spool_dir.is_dir():
            return
        for tmp in self.spool_dir.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        ops: list[_Op] = []
        for meta in sorted(self.spool_dir.glob("*.json")):
            try:
                raw = json.loads(meta.read_text())
                op = _Op(int(raw["seq"]), check_key(str(raw["key"])), str(raw["kind"]), raw.get("sha256"))
            except (OSError, ValueError, KeyError, TypeError):
                log.warning("spool: ignoring unreadable entry %s", meta)
                continue
            if op.kind == "put" and not self._data(op.seq).is_file():
                log.warning("spool: entry %s has no data; ignoring it", meta)
                continue
            ops.append(op)
        known = {f"{op.seq:012d}" for op in ops}
        for data in self.spool_dir.glob("*.data"):
            if data.stem not in known:
                data.unlink(missing_ok=True)
        if not ops:
            return
        with self._cond:
            for op in ops:
                self._queue.append(op)
                self._latest[op.key] = op
            self._next_seq = ops[-1].seq + 1
            self._store_down = True  # it was down when these were written; try, don't assume
        log.warning("spool: %d object(s) from an earlier run are waiting for the store", len(ops))
        self._ensure_flusher()

    def _write_atomic(self, dest: Path, data: bytes) -> None:
        tmp = dest.with_name(dest.name + ".tmp")
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)

    def _copy_verified(self, src: Path, dest: Path, sha256: str | None) -> str:
        tmp = dest.with_name(dest.name + ".tmp")
        digest = hashlib.sha256()
        try:
            with Path(src).open("rb") as fin, tmp.open("wb") as fout:
                while chunk := fin.read(COPY_CHUNK):
                    digest.update(chunk)
                    fout.write(chunk)
                fout.flush()
                os.fsync(fout.fileno())
            if sha256 is not None and digest.hexdigest() != sha256:
                raise ContentChangedError(f"{src} changed while it was being stored")
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return digest.hexdigest()

    def _copy_fileobj_verified(self, f: Reader, dest: Path, sha256: str | None, size: int, name: str) -> str:
        tmp = dest.with_name(dest.name + ".tmp")
        try:
            with tmp.open("wb") as fout:
                digest = copy_verified(f, fout, sha256, size=size, name=name)
                fout.flush()
                os.fsync(fout.fileno())
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return digest

    def _enqueue(self, key: str, kind: str, *, data: bytes | None = None, src: Path | None = None,
                 sha256: str | None = None,
                 fileobj: tuple[Reader, int, str] | None = None) -> None:  # fmt: skip
        """Persist one operation in the spool and queue it (data first, then the entry)."""
        check_key(key)
        try:
            self.spool_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            msg = f"object store unreachable and spool directory {self.spool_dir} unusable: {exc}"
            raise A2rlError(msg) from exc
        with self._cond:
            seq = self._next_seq
            self._next_seq += 1
        try:
            if kind == "put":
                if fileobj is not None:
                    f, size, name = fileobj
                    sha256 = self._copy_fileobj_verified(f, self._data(seq), sha256, size, name)
                elif src is not None:
                    sha256 = self._copy_verified(src, self._data(seq), sha256)
                else:
                    assert data is not None
                    self._write_atomic(self._data(seq), data)
                    sha256 = hashlib.sha256(data).hexdigest()
            op = _Op(seq, key, kind, sha256)
            entry = {"seq": seq, "key": key, "kind": kind, "sha256": sha256, "spooled_at": time.time()}
            self._write_atomic(self._meta(seq), json.dumps(entry).encode())
        except BaseException:
            self._data(seq).unlink(missing_ok=True)
            raise
        with self._cond:
            # Keep the queue ordered even when two writers raced between seq and append.
            self._queue.append(op)
            self._queue.sort(key=lambda o: o.seq)
            current = self._latest.get(key)
            if current is None or current.seq < op.seq:
                self._latest[key] = op
            self.spooled_total += 1
            self._cond.notify_all()
        log.info("spool: %s %s queued for the store (seq %d)", kind, key, seq)
        self._ensure_flusher()

    # --- the flusher ------------------------------------------------------------------------

    def _ensure_flusher(self) -> None:
        with self._cond:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(target=self._flush_loop, name="a2rl-spool-flusher", daemon=True)
            self._thread.start()

    def _apply(self, op: _Op) -> None:
        if op.kind == "delete":
            self.inner.delete(op.key)
            return
        put = getattr(self.inner, "put_file_verified", None)
        if put is not None:
            put(op.key, self._data(op.seq), op.sha256)
        else:
            self.inner.put_file(op.key, self._data(op.seq))

    def _flush_loop(self) -> None:
        backoff = self.min_backoff_s
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                op = self._queue[0]
            try:
                self._apply(op)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if not self._store_down:
                    log.warning("spool: store unreachable (%s); retrying", self.last_error)
                with self._cond:
                    self._store_down = True
                    if self._closing:  # close() already waited as long as it was allowed to
                        return
                    self._cond.wait(backoff)
                backoff = min(self.max_backoff_s, backoff * 2)
                continue
            backoff = self.min_backoff_s
            self._meta(op.seq).unlink(missing_ok=True)
            self._data(op.seq).unlink(missing_ok=True)
            with self._cond:
                if self._store_down:
                    log.info("spool: store reachable again")
                self._store_down = False
                # Not pop(0): a writer that drew a lower seq may have been sorted in front meanwhile.
                self._queue.remove(op)
                if self._latest.get(op.key) == op:
                    del self._latest[op.key]
                if not self._queue:
                    log.info("spool: empty, everything is in the store")
                self._cond.notify_all()

    def mark(self) -> int:
        """A position in the write order: every write made before this call is at or below it."""
        with self._cond:
            return self._next_seq - 1

    def wait_flushed(self, mark: int, timeout: float | None) -> bool:
        """Wait until every write up to `mark` is in the store; False when `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue and self._queue[0].seq <= mark:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def store_down(self) -> bool:
        with self._cond:
            return self._store_down

    def close(self, timeout: float, join_s: float | None = None) -> bool:
        """Flush for up to `timeout` s, then stop the flusher, waiting for it at most `join_s`
        (default: one backoff and 5 s). True when the spool is empty.

        What is still spooled stays on disk; a recorder started on the same spool directory
        uploads it.
        """
        flushed = self.wait_flushed(self.mark(), timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(self.max_backoff_s + 5 if join_s is None else join_s)
        if not flushed:
            log.error("spool: %d object(s) not uploaded; they stay in %s", self.pending(), self.spool_dir)
        return flushed

    # --- ObjectStore --------------------------------------------------------------------------

    def _queued(self) -> bool:
        with self._cond:
            return bool(self._queue)

    def put_bytes(self, key: str, data: bytes) -> None:
        if not self._queued():
            try:
                self.inner.put_bytes(key, data)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._note_down(exc)
        self._enqueue(key, "put", data=data)

    def put_file(self, key: str, path: Path) -> None:
        self.put_file_verified(key, path, None)

    def put_file_verified(self, key: str, path: Path, sha256: str | None) -> None:
        if not self._queued():
            try:
                put = getattr(self.inner, "put_file_verified", None)
                if put is not None:
                    put(key, path, sha256)
                else:
                    self.inner.put_file(key, path)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._note_down(exc)
        self._enqueue(key, "put", src=Path(path), sha256=sha256)

    def put_fileobj_verified(
        self, key: str, f: Reader, sha256: str | None, *, size: int, name: str = ""
    ) -> None:
        """Like `put_file_verified`, from an open file (a snapshot's no-follow descriptor); when the
        store is down the bytes are copied (verified) from `f` into the spool."""
        start = f.tell()
        if not self._queued():
            try:
                self.inner.put_fileobj_verified(key, f, sha256, size=size, name=name)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._note_down(exc)
            f.seek(start)
        self._enqueue(key, "put", sha256=sha256, fileobj=(f, size, name or key))

    def delete(self, key: str) -> None:
        if not self._queued():
            try:
                self.inner.delete(key)
                return
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self._note_down(exc)
        self._enqueue(key, "delete")

    def _note_down(self, exc: BaseException) -> None:
        with self._cond:
            if not self._store_down:
                log.warning("store unreachable (%s: %s); spooling writes in %s",
                            type(exc).__name__, exc, self.spool_dir)  # fmt: skip
            self._store_down = True
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _latest_op(self, key: str) -> _Op | None:
        with self._cond:
            return self._latest.get(key)

    def get_bytes(self, key: str) -> bytes:
        op = self._latest_op(key)
        if op is None:
            return self.inner.get_bytes(key)
        if op.kind == "delete":
            raise NotFoundError(f"object not found: {self.url_for(key)}")
        try:
            return self._data(op.seq).read_bytes()
        except FileNotFoundError:  # flushed meanwhile: the store has it now
            return self.inner.get_bytes(key)

    def get_file(self, key: str, dest: Path) -> None:
        op = self._latest_op(key)
        if op is None:
            self.inner.get_file(key, dest)
            return
        if op.kind == "delete":
            raise NotFoundError(f"object not found: {self.url_for(key)}")
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.spool-tmp")
        try:
            shutil.copyfile(self._data(op.seq), tmp)
            os.replace(tmp, dest)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            self.inner.get_file(key, dest)

    def exists(self, key: str) -> bool:
        op = self._latest_op(key)
        if op is not None:
            return op.kind == "put"
        if self.store_down and self._queued():
            return False  # do not wait for a known-down store; a spooled re-upload is harmless
        try:
            return self.inner.exists(key)
        except Exception as exc:
            if not is_transient(exc):
                raise
            self._note_down(exc)
            return False

    def list(self, prefix: str) -> Iterator[str]:
        folder = check_prefix(prefix)
        keys = set(self.inner.list(prefix))
        with self._cond:
            latest = dict(self._latest)
        for key, op in latest.items():
            if folder and not key.startswith(folder + "/"):
                continue
            if op.kind == "put":
                keys.add(key)
            else:
                keys.discard(key)
        return iter(sorted(keys))

    def url_for(self, key: str) -> str:
        return self.inner.url_for(key)

    def free_bytes(self) -> int | None:
        return self.inner.free_bytes()


def default_spool_dir(run_prefix: str) -> Path:
    """`$TMPDIR/a2rl-spool/<namespace>_<run>-<uid>`: per run, outside the agent's workspace."""
    import tempfile

    return Path(tempfile.gettempdir()) / "a2rl-spool" / run_prefix.strip("/").replace("/", "_")
