"""Conditional creates on S3 and its compatibles: ``PutObject`` with ``If-None-Match: *``, which pyarrow.fs does not
expose, through obstore (the Rust ``object_store`` crate's S3 client).

A copy's lock and owner records and the commit log's record numbers are created this way on an object store, so
of two writers only one gets each: the store decides, not a check followed by a write. A store may ignore the
header (older S3 compatibles do); :func:`conditional_create_enforced` finds out once per output by creating one
probe object twice, and a copy refuses such a store unless the user vouches for a single writer.

Endpoint, region and credentials are those of the pyarrow file system (its URI's ``endpoint_override``,
``region``, ``scheme``, or the standard ``AWS_*`` environment variables, which both clients read).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

__all__ = ["ConditionalCreate", "conditional_create_enforced", "for_filesystem"]


class ConditionalCreate:
    """Creates objects of one S3 file system only where none exists yet (one obstore client per bucket)."""

    def __init__(self, fs: Any) -> None:  # a pyarrow S3FileSystem
        reduced = fs.__reduce__()[1][0]
        self._settings: dict[str, Any] = reduced if isinstance(reduced, dict) else {}
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                from obstore.store import S3Store

                s = self._settings
                config: dict[str, Any] = {}
                if s.get("endpoint_override"):
                    endpoint = s["endpoint_override"]
                    config["endpoint"] = endpoint if "://" in endpoint else f"{s.get('scheme') or 'https'}://{endpoint}"
                if s.get("region"):
                    config["region"] = s["region"]
                if s.get("access_key"):
                    config["access_key_id"] = s["access_key"]
                    config["secret_access_key"] = s.get("secret_key") or ""
                if s.get("session_token"):
                    config["session_token"] = s["session_token"]
                if s.get("force_virtual_addressing"):
                    config["virtual_hosted_style_request"] = True
                store = S3Store(bucket, client_options={"allow_http": True}, **config)
                self._stores[bucket] = store
            return store

    def create(self, path: str, data: bytes) -> bool:
        """Put ``data`` at ``path`` (``bucket/key``) unless an object is there; False if one is."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        bucket, _, key = path.partition("/")
        try:
            obstore.put(self._store(bucket), key, data, mode="create")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True


def for_filesystem(fs: Any) -> ConditionalCreate | None:
    """The conditional creates of an S3 file system; None for other stores, or without obstore installed."""
    if fs.type_name != "s3":
        return None
    try:
        import obstore  # noqa: F401
    except ImportError:
        return None
    return ConditionalCreate(fs)


def conditional_create_enforced(creator: ConditionalCreate, directory: str, fs: Any) -> bool:
    """Whether the store refuses a second create of one key (probed with an object of our own, then deleted)."""
    probe = f"{directory.rstrip('/')}/_splitsource-probe-{uuid.uuid4().hex}"
    try:
        first = creator.create(probe, b"1")
        second = creator.create(probe, b"2")
    finally:
        try:
            fs.delete_file(probe)
        except OSError:
            pass
    return first and not second
