"""Transient faults absorbed at the storage door: a GetObject whose body is cut off (a proxy in front of the real
S3 server sends the headers, then closes), more times than the S3 client retries by itself, costs a retry of that
read, not the copy; a write or a conditional create is never retried blindly: a conditional create whose answer
the proxy loses (it forwards the PUT, then hangs up) is sent once, and the object is read back to learn whose it
is, since a second try would find the object the first one made and take it for another copy's."""

from __future__ import annotations

import http.client
import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs
import pytest

from splitsource._fs import Store
from tests.fixtures import ROOT
from tests.splitsource.copyjob.test_object_store import _ids

pytestmark = pytest.mark.slow

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class CuttingProxy(http.server.ThreadingHTTPServer):
    """Forwards every request to ``upstream`` and cuts off the body of the first ``cuts`` GETs of the first object
    whose path contains ``needle`` (headers as the server sent them, Content-Length included, then the connection
    closes). pyarrow's S3 client retries a GET itself and gives up after 31 such cuts in a row (measured): 35
    outlast it, so the storage door's own retry is what reads the object. A PUT whose path contains
    ``lose_answers_to`` reaches the server, and its answer is lost: the connection closes before it. ``requests``
    logs every request: its method, path and ``If-Match`` header."""

    def __init__(self, upstream: str, needle: str, cuts: int, lose_answers_to: str | None = None) -> None:
        self.upstream, self.needle, self.cuts, self.cut = urlparse(upstream), needle, cuts, []
        self.lose_answers_to = lose_answers_to
        self.requests: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CuttingProxy

    def log_message(self, *args: Any) -> None:
        pass

    def _forward(self) -> None:
        with self.server.lock:
            self.server.requests.append((self.command, self.path, self.headers.get("If-Match")))
        upstream = http.client.HTTPConnection(self.server.upstream.hostname, self.server.upstream.port, timeout=60)
        upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for key, value in self.headers.items():
            upstream.putheader(key, value)
        upstream.endheaders()
        upstream.send(self._body())  # as the client sent it: chunked uploads (aws-chunked parts) stay chunked

        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        with self.server.lock:
            cut = (self.command == "GET" and self.server.needle in self.path and len(data) > 1
                   and len(self.server.cut) < self.server.cuts and self.path in (self.server.cut or [self.path]))
            if cut:
                self.server.cut.append(self.path)
        if self.command == "PUT" and self.server.lose_answers_to and self.server.lose_answers_to in self.path:
            self.close_connection = True  # the server made it; the client never hears so
            return
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in HOP and (key.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(key, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"" if cut else data)
        self.close_connection = True

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        raw = b""
        while True:
            line = self.rfile.readline()
            raw += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (trailer := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    raw += trailer
                return raw + b"\r\n"
            raw += self.rfile.read(size + 2)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


@pytest.fixture()
def cutting_proxy(s3: Any) -> Iterator[CuttingProxy]:
    proxy = CuttingProxy(os.environ["AWS_ENDPOINT_URL"], needle="/log/", cuts=35)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_a_get_cut_short_mid_body_is_read_again_and_the_copy_finishes(s3: Any, cutting_proxy: CuttingProxy) -> None:
    import subprocess

    uri = s3.uri("cut-short")
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{cutting_proxy.server_address[1]}",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "splitsource.cli", "copy", "--connector", "generator", "-o",
                           "rows=4000", "-o", "split_rows=250", "--engine", "local", "--workers", "1",
                           "--max-splits-per-batch", "4", "--output", uri, "--quiet"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert len(cutting_proxy.cut) == 35, "a read of the commit log was not cut 35 times: the test proved nothing"
    assert done.returncode == 0, done.stderr
    assert _ids(uri) == list(range(4000))


def test_a_conditional_create_whose_answer_is_lost_is_sent_once_and_read_back(s3: Any) -> None:
    from splitsource._fs import resolve_filesystem

    proxy = CuttingProxy(os.environ["AWS_ENDPOINT_URL"], needle="\0", cuts=0, lose_answers_to="lock.json")
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        uri = f"{s3.uri('lost-answer')}?endpoint_override=127.0.0.1:{proxy.server_address[1]}&scheme=http"
        store, base = resolve_filesystem(uri)
        assert store.conditional is not None, "the store has no conditional create: the test proves nothing"
        assert store.create(f"{base}/lock.json", b'{"mine": true}'), "this create made the object, and was told no"
        puts = [r for r in proxy.requests if r[0] == "PUT" and r[1].endswith("/lock.json")]
        assert len(puts) == 1, f"the conditional create was sent {len(puts)} times: {puts}"
        assert not store.create(f"{base}/lock.json", b'{"theirs": true}'), "a second writer's create succeeded"
        direct, direct_base = resolve_filesystem(s3.uri("lost-answer"))
        assert direct.read_text(f"{direct_base}/lock.json") == '{"mine": true}', "the first PUT did not land"
    finally:
        proxy.shutdown()
        proxy.server_close()


class _FailingOnce:
    """A file system whose first write (an output stream) fails as a cut connection does; counts the attempts."""

    type_name = "s3"

    def __init__(self) -> None:
        self.writes = 0

    def open_output_stream(self, path: str) -> Any:
        self.writes += 1
        raise OSError("AWS Error NETWORK_CONNECTION during PutObject operation: connection reset")

    def get_file_info(self, path: Any) -> Any:
        return pafs.FileInfo(str(path), pafs.FileType.NotFound)


def test_a_write_or_create_is_never_retried(tmp_path: Path) -> None:
    store = Store(pafs.LocalFileSystem())
    fake = _FailingOnce()
    store.fs, store.local, store.conditional = fake, False, None  # type: ignore[assignment]
    for attempt in (lambda: store.create("bucket/lock.json", b"{}"), lambda: store.write("bucket/x", b"{}")):
        with pytest.raises(OSError, match="connection reset"):
            attempt()
    assert fake.writes == 2, "a write was tried again after its connection failed"
    reads = {"n": 0}

    def flaky(path: Any) -> Any:
        reads["n"] += 1
        if reads["n"] == 1:
            raise OSError("AWS Error NETWORK_CONNECTION during HeadObject operation: connection reset")
        return pafs.FileInfo(str(path), pafs.FileType.NotFound)

    fake.get_file_info = flaky  # type: ignore[method-assign]
    assert store.info("bucket/x") is None and reads["n"] == 2  # a read is tried again
