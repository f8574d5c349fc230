"""What S3 (and its compatibles) can do that pyarrow.fs does not expose: conditional writes and the sweep of
incomplete multipart uploads.

**Conditional writes**: ``PutObject`` with ``If-None-Match: *`` (a create) or ``If-Match`` (a lease's renewal),
through obstore (the Rust ``object_store`` crate's S3 client).

A copy's lock and owner records and the commit log's record numbers are created this way on an object store, so
of two writers only one gets each: the store decides, not a check followed by a write. A store may ignore the
header (older S3 compatibles do); :func:`conditional_create_enforced` finds out once per output by creating one
probe object twice, and a copy refuses such a store unless the user vouches for a single writer.

Endpoint, region and credentials are those of the pyarrow file system (its URI's ``endpoint_override``,
``region``, ``scheme``, or the standard ``AWS_*`` environment variables, which both clients read).

**Incomplete multipart uploads**: a writer killed mid-upload leaves one, invisible to listings and billed until
aborted; :meth:`MultipartUploads.abort_under` aborts those the sink's sweep dooms (the sweep's rule stays the
sink's, :meth:`splitsource.sink.BucketingGlobalCommitter.sweep`).
"""

from __future__ import annotations

import builtins
import calendar
import hashlib
import hmac
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote
from xml.etree import ElementTree

__all__ = ["ConditionalCreate", "MultipartUploads", "Upload", "conditional_create_enforced", "for_filesystem",
           "uploads_for"]

log = logging.getLogger("splitsource.s3")


def settings_of(fs: Any) -> dict[str, Any]:
    """What a pyarrow S3FileSystem was made with (endpoint_override, region, scheme, keys...), as it pickles it:
    both clients below are configured from it, so they reach the store pyarrow reaches."""
    reduced = fs.__reduce__()[1][0]
    return reduced if isinstance(reduced, dict) else {}


class ConditionalCreate:
    """Creates objects of one S3 file system only where none exists yet (one obstore client per bucket)."""

    def __init__(self, fs: Any) -> None:  # a pyarrow S3FileSystem
        self._settings = settings_of(fs)
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, bucket: str, retries: bool = True) -> Any:
        """The bucket's client; ``retries=False``: one that sends each request once (a create must not be sent
        again blindly: see :meth:`create`)."""
        with self._lock:
            store = self._stores.get(f"{bucket}/{retries}")
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
                if not retries:
                    config["retry_config"] = {"max_retries": 0}
                store = S3Store(bucket, client_options={"allow_http": True}, **config)
                self._stores[f"{bucket}/{retries}"] = store
            return store

    def create(self, path: str, data: bytes, attempts: int = 5) -> bool:
        """Put ``data`` at ``path`` (``bucket/key``) unless an object is there; False if one is.

        A create whose answer is lost (the connection cut after the server made the object) is never sent again
        blindly: a second try would find the object the first one made and take it for another writer's. The
        object is read instead: ``data`` there means this create made it (every caller's bytes are its own: a
        lease token, a copy's query id); other bytes, another writer did; none, it is tried again, up to
        ``attempts`` times."""
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        bucket, _, key = path.partition("/")
        failure: BaseException | None = None
        for _ in range(attempts):
            try:
                obstore.put(self._store(bucket, retries=False), key, data, mode="create")
                return True
            except (AlreadyExistsError, PreconditionError):
                # after a lost answer, the object found may be the one this create made
                return failure is not None and self._holds(path, data)
            except Exception as exc:  # noqa: BLE001 - obstore's transport errors: the answer is unknown
                failure = exc
                found = self.read_tagged(path)
                if found is not None:
                    return found[0] == data
        raise OSError(f"cannot create {path}: {failure}")

    def _holds(self, path: str, data: bytes) -> bool:
        found = self.read_tagged(path)
        return found is not None and found[0] == data

    def replace_if(self, path: str, data: bytes, etag: str) -> str | None:
        """Put ``data`` at ``path`` only if the object there still has ``etag`` (``If-Match``): one request. The
        new ETag ("" if the store gives none); None if the object changed or is gone."""
        import obstore
        from obstore.exceptions import NotFoundError, PreconditionError

        bucket, _, key = path.partition("/")
        try:
            return str(obstore.put(self._store(bucket), key, data, mode={"e_tag": etag}).get("e_tag") or "")
        except (PreconditionError, NotFoundError):
            return None

    def read_tagged(self, path: str) -> tuple[bytes, str] | None:
        """The object at ``path`` and its ETag; None if there is none."""
        import obstore
        from obstore.exceptions import NotFoundError

        bucket, _, key = path.partition("/")
        try:
            found = obstore.get(self._store(bucket), key)
            return bytes(found.bytes()), str(found.meta.get("e_tag") or "")
        except NotFoundError:
            return None


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


# -- incomplete multipart uploads --------------------------------------------------------------------------------
#
# pyarrow uploads a large file in parts (a multipart upload) and completes the upload when the stream closes; a
# writer killed before that leaves the upload open: invisible to every listing of objects, billed by the byte, kept
# until aborted. Neither pyarrow.fs nor obstore lists them, so two calls of the S3 API are made here directly,
# signed with AWS Signature Version 4: ListMultipartUploads and AbortMultipartUpload.


@dataclass(frozen=True)
class Upload:
    key: str
    upload_id: str
    initiated: float  # seconds since the epoch


class MultipartUploads:
    """Lists and aborts the incomplete multipart uploads of one S3 file system's buckets."""

    def __init__(self, fs: Any) -> None:  # a pyarrow S3FileSystem
        s = settings_of(fs)
        env = os.environ
        self.region = s.get("region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        endpoint = s.get("endpoint_override") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or ""
        if endpoint and "://" not in endpoint:
            endpoint = f"{s.get('scheme') or 'https'}://{endpoint}"
        self.endpoint = endpoint.rstrip("/")
        self.virtual = bool(s.get("force_virtual_addressing")) or not endpoint  # AWS itself: bucket.s3.region
        self.key = s.get("access_key") or env.get("AWS_ACCESS_KEY_ID") or ""
        self.secret = s.get("secret_key") or env.get("AWS_SECRET_ACCESS_KEY") or ""
        self.token = s.get("session_token") or env.get("AWS_SESSION_TOKEN") or ""

    @property
    def usable(self) -> bool:
        """False without static credentials (an instance profile, SSO): only the AWS SDK resolves those."""
        return bool(self.key and self.secret)

    def list(self, bucket: str, prefix: str) -> list[Upload]:
        uploads: list[Upload] = []
        markers: dict[str, str] = {}
        while True:
            body = self._call("GET", bucket, "", {"uploads": "", "prefix": prefix, **markers})
            try:
                root = ElementTree.fromstring(body)
            except ElementTree.ParseError as exc:
                raise OSError(f"ListMultipartUploads answered with no XML: {exc}") from None
            for upload in root.iter(f"{_NS}Upload"):
                initiated = upload.findtext(f"{_NS}Initiated") or ""
                uploads.append(Upload(upload.findtext(f"{_NS}Key") or "", upload.findtext(f"{_NS}UploadId") or "",
                                      _epoch(initiated)))
            if (root.findtext(f"{_NS}IsTruncated") or "false").lower() != "true":
                return uploads
            markers = {"key-marker": root.findtext(f"{_NS}NextKeyMarker") or "",
                       "upload-id-marker": root.findtext(f"{_NS}NextUploadIdMarker") or ""}

    def abort(self, bucket: str, upload: Upload) -> None:
        self._call("DELETE", bucket, upload.key, {"uploadId": upload.upload_id})

    def abort_under(self, root: str, recursive: bool, doomed: Callable[[str, float], bool]) -> builtins.list[str]:
        """Abort the incomplete uploads under ``root`` (``bucket/prefix``; below its subdirectories too when
        ``recursive``) that ``doomed(path, initiated)`` dooms, and return them. Best effort: an upload that cannot
        be listed or aborted is logged and left to a lifecycle rule (AbortIncompleteMultipartUpload)."""
        bucket, _, key = root.partition("/")
        prefix = key.rstrip("/") + "/" if key else ""
        try:
            found = self.list(bucket, prefix) if self.usable else []
        except OSError as exc:
            log.warning("cannot list the incomplete uploads under %s (%s); a lifecycle rule "
                        "(AbortIncompleteMultipartUpload) removes them", root, exc)
            return []
        aborted = []
        for upload in found:
            path = f"{bucket}/{upload.key}"
            if (not recursive and "/" in upload.key[len(prefix):]) or not doomed(path, upload.initiated):
                continue
            try:
                self.abort(bucket, upload)
            except OSError as exc:
                log.warning("cannot abort the incomplete upload of %s (%s)", path, exc)
                continue
            aborted.append(f"{path} (incomplete upload)")
        return aborted

    def _call(self, method: str, bucket: str, key: str, query: dict[str, str]) -> bytes:
        now = time.gmtime()
        stamp, day = time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now)
        if self.virtual:
            base = self.endpoint or f"https://s3.{self.region}.amazonaws.com"
            scheme, _, host = base.partition("://")
            host, path = f"{bucket}.{host}", "/" + key
        else:
            scheme, _, host = self.endpoint.partition("://")
            path = f"/{bucket}/{key}" if key else f"/{bucket}"
        path = quote(path, safe="/-_.~")
        canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
        headers = {"host": host, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": stamp}
        if self.token:
            headers["x-amz-security-token"] = self.token
        names = ";".join(sorted(headers))
        canonical = "\n".join([method, path, canonical_query, "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                               names, _EMPTY_SHA256])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        signing = ("AWS4" + self.secret).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.key}/{scope}, SignedHeaders={names}, "
                                    f"Signature={signature}")
        del headers["host"]
        url = f"{scheme}://{host}{path}" + (f"?{canonical_query}" if canonical_query else "")
        import urllib.request  # here: http.client, ssl and email cost every copy 0.05 s of CPU at import

        request = urllib.request.Request(url, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - the store's own endpoint
            return bytes(response.read())


_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _epoch(text: str) -> float:
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0.0


def uploads_for(fs: Any) -> MultipartUploads | None:
    """The multipart uploads of an S3 file system; None for other stores."""
    return MultipartUploads(fs) if fs.type_name == "s3" else None
