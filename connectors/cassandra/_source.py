"""CassandraSource: a whole table, read by token range, page by page, resumable from the driver's paging state.

Options:

==================  ============  ===================================================================
option              default       meaning
==================  ============  ===================================================================
keyspace            (required)    keyspace of the table
table               (required)    table to read
hosts               127.0.0.1     comma-separated contact points
port                9042          CQL port
local_dc            ""            data center to read from (empty: the driver's default)
columns             ""            comma-separated projection (empty: every column)
consistency         LOCAL_ONE     read consistency level
fetch_size          5000          rows per page (one page per fetch)
min_fetch_size      100           on a read timeout, halve the page down to this and read on
split_size_mb       64            target split size, from size estimates; minimum 1
splits              0             a number of splits instead of a size (shared by estimated size)
username            ""            for PasswordAuthenticator
password            ""            never printed; better: password_file or SPLITSOURCE_CASSANDRA_PASSWORD
password_file       ""            a file whose first line is the password (not on the command line)
protocol_version    auto          native protocol: auto negotiates (v5 on 4.0+, v4 on 3.11), or 3, 4, 5
ssl                 false         use TLS (the server's certificate is verified against ssl_ca_file)
ssl_ca_file         ""            CA certificate(s) (PEM) that signed the servers' certificates
ssl_verify          true          verify the server's certificate (false: encrypted, but to anyone; warned)
ssl_check_hostname  true          the certificate must name the address connected to
ssl_cert_file       ""            client certificate (PEM), for servers that require one
ssl_key_file        ""            the client certificate's private key (PEM)
ssl_key_password    ""            password of an encrypted ssl_key_file (never printed)
token_range         ""            only keys with start < token <= end: "start,end" (wraps when start > end)
where               ""            an extra CQL restriction, served without ALLOW FILTERING
writetime_columns   ""            add <col>_writetime for these regular columns (a list, or *)
ttl_columns         ""            add <col>_ttl (seconds left, null: none) for these columns (a list, or *)
connect_timeout_s   10            connecting and the control connection
request_timeout_s   30            one page request
==================  ============  ===================================================================

Example::

    (spark.read.format("splitsource").option("connector", "cassandra")
     .option("keyspace", "shop").option("table", "orders").load())
"""

from __future__ import annotations

import gc
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectors.cassandra._reference import reference_rows
from connectors.cassandra._tokens import PARTITIONERS, PlanEntry, TokenRange, build_plan, ring_ranges
from connectors.cassandra._types import (
    arrow_type,
    column_converter,
    exact_protocol_handler,
    kind,
    select_expression,
)
from serializers import MsgpackRecordSerializer, SimpleVersionedSerializer
from splitsource import (
    EnumeratorState,
    OptionsError,
    Predicate,
    ReadEvent,
    RecordEmitter,
    RecordsBySplits,
    Secret,
    Source,
    Split,
    SplitEnumerator,
    SplitEnumeratorContext,
    SplitQueue,
    SplitReader,
    SplitSourceError,
    SplitState,
    option,
)

__all__ = ["CassandraOptions", "CassandraPosition", "CassandraSource", "CassandraSplit"]

log = logging.getLogger("splitsource.cassandra")
_CONSISTENCY = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")
MIN_SPLIT_SIZE_MB = 1.0
PASSWORD_ENV = "SPLITSOURCE_CASSANDRA_PASSWORD"


@dataclass(frozen=True)
class CassandraOptions:
    keyspace: str = option(doc="keyspace of the table")
    table: str = option(doc="table to read")
    hosts: str = option("127.0.0.1", doc="comma-separated contact points")
    port: int = option(9042, doc="CQL port", minimum=1, maximum=65535)
    local_dc: str = option("", doc="data center to read from")
    columns: str = option("", doc="comma-separated projection (empty: all)")
    consistency: str = option("LOCAL_ONE", doc="read consistency level", choices=_CONSISTENCY,
                              parse=lambda s: s.strip().upper())
    fetch_size: int = option(5000, doc="rows per page", minimum=1, maximum=1_000_000)
    min_fetch_size: int = option(100, doc="on a read timeout the page is halved, down to this many rows, and read "
                                          "again from the same paging state; below it the framework retries",
                                 minimum=1)
    split_size_mb: float = option(64.0, doc="target split size in MiB", minimum=MIN_SPLIT_SIZE_MB)
    splits: int = option(0, doc="number of splits instead of a size (0: by size)", minimum=0)
    username: str = option("", doc="user name for PasswordAuthenticator")
    password: Secret = option(Secret(""), doc="password (never printed); visible in ps: prefer password_file")
    password_file: str = option("", doc="a file whose first line is the password")
    protocol_version: str = option("auto", doc="native protocol version: auto (negotiated: v5 on Cassandra 4.0 and "
                                               "later, v4 on 3.11 and ScyllaDB) or 3, 4, 5",
                                   choices=("auto", "3", "4", "5"), parse=lambda s: s.strip().lower())
    ssl: bool = option(False, doc="use TLS; the server's certificate is verified against ssl_ca_file")
    ssl_ca_file: str = option("", doc="CA certificate(s), PEM, that signed the servers' certificates")
    ssl_verify: bool = option(True, doc="verify the server's certificate (false: encrypted but unauthenticated, "
                                        "warned once)")
    ssl_check_hostname: bool = option(True, doc="the server's certificate must name the address connected to")
    ssl_cert_file: str = option("", doc="client certificate, PEM (servers with require_client_auth)")
    ssl_key_file: str = option("", doc="the client certificate's private key, PEM (default: in ssl_cert_file)")
    ssl_key_password: Secret = option(Secret(""), doc="password of an encrypted ssl_key_file (never printed)")
    token_range: str = option("", doc="only keys with start < token <= end: 'start,end' (start > end wraps around "
                                      "the ring)", parse=lambda text: _parse_token_range(text))
    where: str = option("", doc="an extra CQL restriction the server serves without ALLOW FILTERING, e.g. "
                                "\"pk IN (1, 2)\"; checked by preparing the query", parse=str.strip)
    writetime_columns: str = option("", doc="add <col>_writetime (timestamp, µs) for these regular columns: a "
                                            "comma-separated list, or * for every one that has it", parse=str.strip)
    ttl_columns: str = option("", doc="add <col>_ttl (seconds left, null when none) for these regular columns: a "
                                      "list, or *", parse=str.strip)
    connect_timeout_s: float = option(10.0, doc="connect timeout in seconds", minimum=0.1)
    request_timeout_s: float = option(30.0, doc="timeout of one page request in seconds", minimum=0.1)

    def resolved_password(self) -> str:
        """The password: option ``password``, else the first line of ``password_file``, else the environment
        variable ``SPLITSOURCE_CASSANDRA_PASSWORD`` (as dsbulk and cqlsh offer), so it need not be on ``ps``."""
        if self.password.reveal():
            return self.password.reveal()
        if self.password_file:
            try:
                with open(self.password_file, encoding="utf-8") as f:
                    return f.readline().rstrip("\r\n")
            except OSError as exc:
                raise OptionsError(f"option 'password_file': cannot read {self.password_file}: "
                                   f"{exc.strerror}") from None
        return os.environ.get(PASSWORD_ENV, "")

    @property
    def host_list(self) -> list[str]:
        return [h.strip() for h in self.hosts.split(",") if h.strip()]

    def token_intervals(self, lo: int, hi: int) -> list[TokenRange]:
        """``token_range`` as ranges of the partitioner's ``(lo, hi]`` (two when it wraps); the whole ring when
        the option is not set."""
        if not self.token_range:
            return [TokenRange(lo, hi)]
        start, end = (int(t) for t in self.token_range.split(","))
        for token in (start, end):
            if not lo <= token <= hi:
                raise OptionsError(f"option 'token_range': token {token} is outside the partitioner's range "
                                   f"[{lo}, {hi}]")
        if start < end:
            return [TokenRange(start, end)]
        return [r for r in (TokenRange(start, hi), TokenRange(lo, end)) if r.width > 0]


def _parse_token_range(text: str) -> str:
    """'start,end' with integer tokens, normalised; '' for the whole ring."""
    if not text.strip():
        return ""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError("expected 'start,end' (two tokens)")
    try:
        start, end = (int(p) for p in parts)
    except ValueError:
        raise ValueError("tokens are integers: 'start,end'") from None
    if start == end:
        raise ValueError("start and end are the same token: the range is empty")
    return f"{start},{end}"


class CassandraConnectionError(SplitSourceError, ConnectionError):
    """Cassandra could not be reached, refused the credentials, or has no such keyspace or table."""


class CassandraAuthenticationError(CassandraConnectionError, OptionsError):
    """Cassandra refused the login (a wrong user or password, or none given where one is required): a usage
    error (exit 2)."""


class CassandraAuthorizationError(CassandraConnectionError, OptionsError):
    """The role logged in may not read the table (no ``SELECT`` permission): a usage error (exit 2)."""


class CassandraTimeoutError(SplitSourceError):
    """A page timed out at the smallest page size (``min_fetch_size``): transient, retried by the framework."""


def connect(options: CassandraOptions, *, schema_metadata: bool = True) -> tuple[Any, Any]:
    """A (cluster, session) pair; every failure becomes one clear :class:`CassandraConnectionError`."""
    from cassandra import AuthenticationFailed
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster, NoHostAvailable, UnresolvableContactPoints

    kwargs: dict[str, Any] = {}
    if options.username:
        kwargs["auth_provider"] = PlainTextAuthProvider(options.username, options.resolved_password())
    if options.ssl:
        kwargs["ssl_context"] = tls_context(options)
    if options.protocol_version != "auto":
        kwargs["protocol_version"] = int(options.protocol_version)
    kwargs["schema_metadata_enabled"] = schema_metadata
    try:
        cluster = _cluster(Cluster, options, kwargs)
    except UnresolvableContactPoints:
        raise OptionsError(f"option 'hosts': no address found for {options.hosts}") from None
    where = f"{options.hosts}:{options.port}"
    try:
        session = cluster.connect()
    except NoHostAvailable as exc:
        cluster.shutdown()
        # errors is {host: exception}, or only a list of hosts when the driver never got as far as a connection
        errors = exc.errors if isinstance(exc.errors, dict) else {str(h): None for h in exc.errors or ()}
        if any(isinstance(e, AuthenticationFailed) for e in errors.values()):
            raise CassandraAuthenticationError(_refused_credentials(options, where, errors)) from None
        tls_problem = _tls_problem(options, errors.values())
        if tls_problem:
            what = "TLS with Cassandra" if options.ssl else "Cassandra"
            raise CassandraConnectionError(f"{what} at {where} failed: {tls_problem}") from None
        version_problem = _protocol_problem(options, errors.values())
        if version_problem:
            raise CassandraConnectionError(f"Cassandra at {where} {version_problem}") from None
        reasons = "; ".join(f"{h}: {type(e).__name__ if e is not None else 'no connection'}"
                            for h, e in list(errors.items())[:3])
        raise CassandraConnectionError(
            f"cannot reach Cassandra at {where} within {options.connect_timeout_s:g}s ({reasons}); "
            "check the 'hosts' and 'port' options"
        ) from None
    except AuthenticationFailed as exc:
        cluster.shutdown()
        raise CassandraAuthenticationError(_refused_credentials(options, where, {where: exc})) from None
    return cluster, session


def _refused_credentials(options: CassandraOptions, where: str, errors: Mapping[Any, Any]) -> str:
    if not options.username:
        return (f"Cassandra at {where} requires a login: give -o username=... and the password in password_file or "
                f"{PASSWORD_ENV}")
    return f"Cassandra at {where} refused the credentials of user '{options.username}' (wrong user name or password)"


def _tls_problem(options: CassandraOptions, errors: Iterable[Any]) -> str:
    """One line for a TLS failure among ``errors`` (a certificate the CA did not sign, a host name it does not
    name, a client certificate the server wants, plain text to a TLS port); empty if none. The driver sometimes
    re-raises the handshake's error as another type carrying its text, so the text decides."""
    import ssl

    for error in errors:
        if error is None:
            continue
        text = str(error)
        if "CERTIFICATE_VERIFY_FAILED" in text or isinstance(error, ssl.SSLCertVerificationError):
            found = re.search(r"certificate verify failed: ([^(]*)", text)
            reason = (getattr(error, "verify_message", None) or (found.group(1) if found else text)).strip()
            if "mismatch" in reason.lower() or "not valid for" in reason.lower():
                return (f"the server's certificate does not name the address connected to ({reason}); connect by a "
                        "name or address it holds, or ssl_check_hostname=false")
            return f"the server's certificate was not verified by ssl_ca_file ({reason})"
        if isinstance(error, ssl.SSLError) or "[SSL" in text:
            reason = re.sub(r"\s*\(_ssl\.c:\d+\)", "", text.split("Last error: ")[-1]).strip(" ')\"")
            if not options.ssl_cert_file and (isinstance(error, ssl.SSLEOFError) or "EOF" in text
                                              or "CERTIFICATE_REQUIRED" in text or "alert" in text.lower()):
                return (f"the server ended the handshake ({reason}): it may require a client certificate "
                        "(ssl_cert_file, ssl_key_file)")
            return reason
        if isinstance(error, ConnectionResetError | EOFError):
            if options.ssl:
                return f"the server closed the connection during the handshake ({type(error).__name__})"
            return (f"the server closed the connection ({type(error).__name__}) before speaking CQL: does it "
                    "require TLS (ssl=true)?")
    return ""


def _protocol_problem(options: CassandraOptions, errors: Iterable[Any]) -> str:
    from cassandra import ProtocolVersion
    from cassandra.connection import ProtocolError

    for error in errors:
        if isinstance(error, ProtocolError) or "protocol version" in str(error).lower():
            supported = ", ".join(str(v) for v in ProtocolVersion.SUPPORTED_VERSIONS)
            return (f"does not speak native protocol v{options.protocol_version} ({error}); leave protocol_version "
                    f"at auto, or choose one the server speaks (this driver speaks {supported})")
    return ""


_warned_unverified = False
_warn_lock = threading.Lock()


def check_tls_options(options: CassandraOptions) -> None:
    """Refuse TLS options that would encrypt to anyone without saying so, or that cannot work together."""
    if not options.ssl:
        given = [n for n in ("ssl_ca_file", "ssl_cert_file", "ssl_key_file") if getattr(options, n)]
        if given:
            raise OptionsError(f"option '{given[0]}' is for TLS: add ssl=true")
        return
    if options.ssl_verify and not options.ssl_ca_file:
        raise OptionsError("option 'ssl': TLS needs the CA that signed the servers' certificates: give "
                           "ssl_ca_file=/path/ca.pem, or ssl_verify=false to encrypt without verifying the server")
    if options.ssl_key_file and not options.ssl_cert_file:
        raise OptionsError("option 'ssl_key_file': give the client certificate too (ssl_cert_file)")
    if not options.ssl_verify and options.ssl_ca_file:
        raise OptionsError("option 'ssl_verify': false ignores ssl_ca_file; leave one of them out")


def tls_context(options: CassandraOptions) -> Any:
    """The TLS context of ``options`` (checked by :func:`check_tls_options`): verifying by default, with the
    client certificate when given. Unreadable files fail in one line naming the option."""
    import ssl

    global _warned_unverified
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if options.ssl_verify:
        context.check_hostname = options.ssl_check_hostname
        try:
            context.load_verify_locations(cafile=options.ssl_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise OptionsError(f"option 'ssl_ca_file': cannot read a PEM certificate from {options.ssl_ca_file}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        with _warn_lock:
            if not _warned_unverified:
                _warned_unverified = True
                log.warning("ssl_verify=false: the connection is encrypted but the server is not verified; anyone "
                            "between here and Cassandra can read and change the data")
    if options.ssl_cert_file:
        try:
            context.load_cert_chain(options.ssl_cert_file, options.ssl_key_file or None,
                                    password=options.ssl_key_password.reveal() or None)
        except (OSError, ssl.SSLError) as exc:
            raise OptionsError(f"option 'ssl_cert_file': cannot load the client certificate {options.ssl_cert_file}"
                               f"{' with ' + options.ssl_key_file if options.ssl_key_file else ''}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    return context


def _cluster(Cluster: Any, options: CassandraOptions, kwargs: dict[str, Any]) -> Any:  # noqa: N803 - the class
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
    from cassandra.query import tuple_factory

    return Cluster(
        options.host_list,
        port=options.port,
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=options.local_dc or None)),
                request_timeout=options.request_timeout_s,
                row_factory=tuple_factory,
            )
        },
        connect_timeout=options.connect_timeout_s,
        control_connection_timeout=options.connect_timeout_s,
        **kwargs,
    )


def _table_metadata(cluster: Any, options: CassandraOptions) -> Any:
    keyspace = cluster.metadata.keyspaces.get(options.keyspace)
    if keyspace is None:
        raise CassandraConnectionError(
            f"option 'keyspace': keyspace '{options.keyspace}' does not exist at {options.hosts}"
        )
    table = keyspace.tables.get(options.table)
    if table is None:
        raise CassandraConnectionError(
            f"option 'table': table '{options.keyspace}.{options.table}' does not exist; tables: "
            f"{', '.join(sorted(keyspace.tables)) or '(none)'}"
        )
    return table


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class CassandraSplit(Split):
    """Keys with ``start < token <= end``; ``paging_state`` is where a resumed read continues (None: start), and
    ``page_size`` the page a resumed read asks for (a wide partition that timed out keeps its smaller pages).

    ``done`` marks a split whose last page was emitted: without it, a split read to the end (paging state None
    again) could not be told from one never started, and a restore would read it twice.
    """

    start: int
    end: int
    estimated_bytes: int = 0
    paging_state: bytes | None = None
    rows_before: int = 0
    done: bool = False
    page_size: int = 0  # rows per page from here on, after read timeouts shrank it (0: option fetch_size)

    @property
    def split_id(self) -> str:
        return f"token({self.start},{self.end}]"

    @property
    def estimated_size_bytes(self) -> int:
        return self.estimated_bytes


class CassandraSplitState(SplitState[CassandraSplit]):
    def __init__(self, split: CassandraSplit) -> None:
        self.split = split
        self.paging_state = split.paging_state
        self.rows = split.rows_before
        self.done = split.done
        self.page_size = split.page_size

    @property
    def split_id(self) -> str:
        return self.split.split_id

    def to_split(self) -> CassandraSplit:
        s = self.split
        return CassandraSplit(s.start, s.end, s.estimated_bytes, self.paging_state, self.rows, self.done,
                              self.page_size)


@dataclass(frozen=True)
class CassandraPosition:
    """The plan (one entry per ring range, already sized) and a cursor: round ``round`` at entry ``entry``."""

    plan: tuple[PlanEntry, ...]
    round: int = 0
    entry: int = 0


class CassandraEnumerator(SplitEnumerator[CassandraSplit, CassandraPosition]):
    """Plans once from the token ring and size estimates of every node; then cuts splits lazily.

    Splits come in rounds over the interleaved plan (sub-range ``r`` of every range that has one), so
    consecutive splits go to different replica sets. The state is the plan itself plus a cursor, so a restored
    enumerator never contacts the cluster to re-plan.
    """

    def __init__(
        self,
        source: CassandraSource,
        context: SplitEnumeratorContext | None,
        position: CassandraPosition | None = None,
        pending: Sequence[CassandraSplit] = (),
    ) -> None:
        super().__init__(context, pending)
        self._source = source
        self._position = position
        self._rounds: int | None = None

    def start(self) -> None:
        if self._position is None:
            self._position = CassandraPosition(self._source.plan())

    def _pos(self) -> CassandraPosition:
        if self._position is None:
            self.start()
        assert self._position is not None
        return self._position

    def generate_split(self) -> CassandraSplit | None:
        pos = self._pos()
        plan, rnd, entry = pos.plan, pos.round, pos.entry
        if self._rounds is None:  # once: a split must cost O(1), not O(ranges) (a 256,000-range ring)
            self._rounds = max((e.parts for e in plan), default=0)
        max_parts = self._rounds
        while rnd < max_parts:
            while entry < len(plan):
                e = plan[entry]
                entry += 1
                if rnd < e.parts:
                    self._position = CassandraPosition(plan, rnd, entry)
                    sub = e.sub_range(rnd)
                    return CassandraSplit(sub.start, sub.end, e.estimated_bytes // e.parts)
            rnd, entry = rnd + 1, 0
        self._position = CassandraPosition(plan, rnd, entry)
        return None

    def position(self) -> CassandraPosition:
        return self._pos()

    def estimated_total_splits(self) -> int:
        return sum(e.parts for e in self._pos().plan)


# (rows of one page or None, paging state after it, the page size it was read with); rows None: a notice that
# the page size shrank, with nothing read
_Raw = tuple[list[tuple[Any, ...]] | None, bytes | None, int]


class CassandraSplitReader(SplitReader[CassandraSplit, _Raw]):
    """One session and one prepared statement per reader; one page per fetch, resumable by paging state.

    Wide partitions: a page that times out (the coordinator's ``ReadTimeout`` or the client's
    ``OperationTimedOut``) is asked for again from the same paging state with half as many rows, down to
    ``min_fetch_size``; only a timeout at that floor goes to the framework's retry (with its backoff). The split
    keeps its smaller page size for the rest of it, in its state too, so a retry or a resumed copy does not time
    out its way down again. Each shrink is a ``page_shrunk`` event, and the partition the next page starts in a
    ``hot_partition`` event naming its token.
    """

    def __init__(self, source: CassandraSource) -> None:
        from cassandra import ConsistencyLevel, OperationTimedOut, ReadTimeout

        self._source = source
        self._options = source.options
        self._cluster, self._session = connect(self._options, schema_metadata=False)
        self._session.client_protocol_handler = exact_protocol_handler()  # see connectors.cassandra._types
        self._statement = self._session.prepare(source.select_cql())
        self._statement.consistency_level = getattr(ConsistencyLevel, self._options.consistency)
        self._statement.fetch_size = self._options.fetch_size
        self._timeouts = (ReadTimeout, OperationTimedOut)
        # the head split's paging state: where its next page starts (None: at its beginning)
        self._queue: SplitQueue[CassandraSplit, bytes | None] = SplitQueue(lambda split: split.paging_state)
        self._page_sizes: dict[str, int] = {}
        self._shrunk: set[str] = set()  # splits whose next page names the hot partition
        self._woken = threading.Event()

    def add_splits(self, splits: Sequence[CassandraSplit]) -> None:
        self._queue.add(splits)

    def _request(self, split: CassandraSplit, page_size: int) -> Any:
        """One page of ``split`` from the current paging state; None when woken up before it came."""
        done = threading.Event()
        bound = self._statement.bind((split.start, split.end))
        bound.fetch_size = page_size
        future = self._session.execute_async(bound, paging_state=self._queue.position,
                                             timeout=self._options.request_timeout_s)
        future.add_callbacks(lambda _: done.set(), lambda _: done.set())
        while not done.wait(0.05):
            if self._woken.is_set():
                self._woken.clear()
                return None  # the page is requested again by the next fetch: reads are idempotent
        return future.result()  # raises the request's error, if any

    def fetch(self) -> RecordsBySplits[_Raw]:
        split = self._queue.head
        if split is None:
            return RecordsBySplits()
        if split.done:
            self._queue.pop()
            return RecordsBySplits.finished_only(split.split_id)
        page_size = self._page_sizes.setdefault(split.split_id, split.page_size or self._options.fetch_size)
        try:
            result = self._request(split, page_size)
        except self._timeouts as exc:
            floor = min(self._options.min_fetch_size, self._options.fetch_size)
            if page_size <= floor:  # the framework retries from the split state, with its backoff
                raise CassandraTimeoutError(
                    f"a page of {page_size} rows (min_fetch_size) timed out ({type(exc).__name__}: {exc}); a "
                    f"partition too wide for request_timeout_s={self._options.request_timeout_s:g}, or a node "
                    "overloaded") from exc
            smaller = max(floor, page_size // 2)
            self._page_sizes[split.split_id] = smaller
            self._shrunk.add(split.split_id)
            event = ReadEvent("page_shrunk", split.split_id, f"{type(exc).__name__} on a page of {page_size} rows; "
                                                             f"reading on from there with pages of {smaller}")
            return RecordsBySplits([(split.split_id, (None, self._queue.position, smaller))], events=(event,))
        if result is None:
            return RecordsBySplits()
        rows = list(result.current_rows)
        next_state = result.paging_state
        events: tuple[ReadEvent, ...] = ()
        if split.split_id in self._shrunk and rows:
            self._shrunk.discard(split.split_id)
            events = (ReadEvent("hot_partition", split.split_id, f"{self._source.token_of(self._session, rows)}, "
                                                                 f"read in pages of {page_size} rows"),)
        batches = [(split.split_id, (rows, next_state, page_size))] if rows or next_state is None else []
        if next_state is not None:
            self._queue.position = next_state
            return RecordsBySplits(batches, events=events)
        self._queue.pop()
        self._page_sizes.pop(split.split_id, None)
        return RecordsBySplits(batches, frozenset({split.split_id}), events)

    def wake_up(self) -> None:
        self._woken.set()

    def close(self) -> None:
        self._cluster.shutdown()


class CassandraEmitter(RecordEmitter[_Raw, CassandraSplit]):
    """Rows (tuples) to one Arrow batch, column by column; sets the state to the page's paging state."""

    def __init__(self, schema: pa.Schema, converters: Sequence[Any]) -> None:
        self._schema = schema
        self._converters = converters

    def emit(self, raw: _Raw, state: SplitState[CassandraSplit]) -> pa.RecordBatch | None:
        assert isinstance(state, CassandraSplitState)
        rows, next_state, page_size = raw
        state.page_size = page_size
        if rows is None:  # the page size shrank; nothing was read
            return None
        state.paging_state = next_state
        state.done = next_state is None
        state.rows += len(rows)
        if not rows:
            return None
        columns = list(zip(*rows, strict=True))
        return pa.RecordBatch.from_arrays(
            [convert(list(col)) for convert, col in zip(self._converters, columns, strict=True)], schema=self._schema
        )


def _entry_fields(e: PlanEntry) -> list[Any]:
    return [str(e.start), str(e.end), e.parts, e.estimated_bytes]


CASSANDRA_SPLIT_SERIALIZER: MsgpackRecordSerializer[CassandraSplit] = MsgpackRecordSerializer(
    "CassandraSplitSerializer",
    2,
    # tokens as text: RandomPartitioner tokens do not fit msgpack's 64-bit integers
    to_fields=lambda s: [str(s.start), str(s.end), s.estimated_bytes, s.paging_state, s.rows_before, s.done,
                         s.page_size],
    from_fields=lambda f: CassandraSplit(int(f[0]), int(f[1]), int(f[2]), f[3], int(f[4]), bool(f[5]), int(f[6])),
    upgrades={1: lambda f: [*f, 0]},  # version 2 added page_size
)
CASSANDRA_POSITION_SERIALIZER: MsgpackRecordSerializer[CassandraPosition] = MsgpackRecordSerializer(
    "CassandraPositionSerializer",
    1,
    to_fields=lambda p: [[_entry_fields(e) for e in p.plan], p.round, p.entry],
    from_fields=lambda f: CassandraPosition(
        tuple(PlanEntry(int(e[0]), int(e[1]), int(e[2]), int(e[3])) for e in f[0]), int(f[1]), int(f[2])
    ),
)


class CassandraSource(Source[CassandraSplit, CassandraPosition, _Raw, CassandraOptions]):
    """A whole Cassandra table (or a projection of it); see the module docstring for options."""

    name = "cassandra"
    options_class = CassandraOptions
    _warned_empty_estimates = False

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        if not self.options.host_list:
            raise OptionsError("option 'hosts': give at least one host")
        check_tls_options(self.options)
        self._meta: tuple[list[str], list[str], pa.Schema, list[Any]] | None = None
        self._clustering: list[str] = []
        self._volatile: list[str] = []
        self._kinds: dict[str, str] = {}
        self._cluster_name = ""

    def _metadata(self) -> tuple[list[str], list[str], pa.Schema, list[Any]]:
        """(partition key columns in schema order, selectors of the wanted columns, Arrow schema, converters)."""
        if self._meta is None:
            cluster, session = connect(self.options)
            try:
                self._cluster_name = str(cluster.metadata.cluster_name or "")
                table = _table_metadata(cluster, self.options)
                pk = [c.name for c in table.partition_key]
                _check_can_read(session, self.options, pk)
                self._clustering = [c.name for c in table.clustering_key]
                wanted = [c.strip() for c in self.options.columns.split(",") if c.strip()] or list(table.columns)
                unknown = [c for c in wanted if c not in table.columns]
                if unknown:
                    raise OptionsError(
                        f"option 'columns': {', '.join(unknown)} not in {self.options.keyspace}.{self.options.table}; "
                        f"columns: {', '.join(table.columns)}"
                    )
                meta = _cell_metadata(cluster, table, self.options)
                extra = [f"{fn}({_quote(c)})" for fn, c, _ in meta]
                prepared = _prepare_metadata(session, f"SELECT {', '.join([*(_quote(c) for c in wanted), *extra])} "
                                             f"FROM {_quote(self.options.keyspace)}.{_quote(self.options.table)} "
                                             "LIMIT 1", bool(meta))
                types = [col[3] for col in prepared.result_metadata][:len(wanted)]  # (keyspace, table, name, type)
                selectors = [select_expression(t, _quote(n)) for n, t in zip(wanted, types, strict=True)] + extra
                if self.options.where:
                    _check_where(session, self._select(pk, selectors), self.options.where)
            finally:
                cluster.shutdown()
            fields = [pa.field(n, arrow_type(t), nullable=True) for n, t in zip(wanted, types, strict=True)]
            converters = [column_converter(t, n) for n, t in zip(wanted, types, strict=True)]
            for function, _, name in meta:
                cell_type = _WRITETIME_TYPE if function == "WRITETIME" else pa.int32()
                fields.append(pa.field(name, cell_type, nullable=True))
                converters.append(_cell_converter(cell_type))
            schema = pa.schema(fields)
            self._volatile = [name for function, _, name in meta if function == "TTL"]
            self._kinds = {n: kind(t) for n, t in zip(wanted, types, strict=True)}
            self._meta = (pk, selectors, schema, converters)
        return self._meta

    def _select(self, pk: Sequence[str], selectors: Sequence[str], where: str | None = None) -> str:
        token = f"token({', '.join(_quote(c) for c in pk)})"
        where = self.options.where if where is None else where
        where = f" AND {where}" if where else ""
        return (
            f"SELECT {', '.join(selectors)} FROM {_quote(self.options.keyspace)}."
            f"{_quote(self.options.table)} WHERE {token} > ? AND {token} <= ?{where}"
        )

    def select_cql(self) -> str:
        """The query of a split: its token range (two bind markers) and the ``where`` option."""
        pk, selectors, _, _ = self._metadata()
        return self._select(pk, selectors)

    def restrictions(self) -> list[str]:
        """The WHERE clauses that select what this source reads, for a plain scan (verify): one per interval of
        ``token_range`` (with ``where``), or ``where`` alone, or none (the whole table)."""
        if not self.options.token_range:
            return [self.options.where] if self.options.where else []
        pk = self._metadata()[0]
        token = f"token({', '.join(_quote(c) for c in pk)})"
        lo, hi = self._partitioner_bounds()
        where = f" AND {self.options.where}" if self.options.where else ""
        return [f"{token} > {r.start} AND {token} <= {r.end}{where}" for r in self.options.token_intervals(lo, hi)]

    def _partitioner_bounds(self) -> tuple[int, int]:
        cluster, _ = connect(self.options, schema_metadata=False)
        try:
            return _bounds(cluster)
        finally:
            cluster.shutdown()

    def schema(self) -> pa.Schema:
        return self._metadata()[2]

    def token_of(self, session: Any, rows: Sequence[Sequence[Any]]) -> str:
        """``token <t>`` of the partition most of ``rows`` (a page as read) are in, asked of the server; a
        description without it when the partition key is not among the columns read or cannot be bound."""
        pk, _, schema, _ = self._metadata()
        names = schema.names
        if not all(c in names for c in pk):
            return "token unknown (the partition key is not among the columns read)"
        indices = [names.index(c) for c in pk]
        row_keys = [[row[i] for i in indices] for row in rows]
        shown = [repr(key) for key in row_keys]  # repr: values of any type hash
        values = row_keys[shown.index(Counter(shown).most_common(1)[0][0])]
        table = f"{_quote(self.options.keyspace)}.{_quote(self.options.table)}"
        keys = ", ".join(_quote(c) for c in pk)
        where = " AND ".join(f"{_quote(c)} = ?" for c in pk)
        try:
            lookup = session.prepare(f"SELECT token({keys}) FROM {table} WHERE {where} LIMIT 1")
            found = session.execute(lookup, values).one()
        except Exception as exc:  # noqa: BLE001 - a report, never a failure of the read
            return f"token unknown ({type(exc).__name__})"
        return f"token {found[0]}" if found else "token unknown (the partition is gone)"

    def plan(self) -> tuple[PlanEntry, ...]:
        """Read the ring and every node's size estimates (all nodes at once, a bounded number in flight), and size
        each range (see :func:`plan_ring`)."""
        o = self.options
        cluster, session = connect(o)
        try:
            _table_metadata(cluster, o)
            token_map = cluster.metadata.token_map

            def replicas(end: int) -> tuple[str, ...]:
                return tuple(sorted(str(h.endpoint) for h in token_map.get_replicas(o.keyspace,
                                                                                     token_map.token_class(end))))

            rows = gather_estimates(session, list(cluster.metadata.all_hosts()), o)
            return plan_ring((t.value for t in token_map.ring), replicas, rows, _bounds(cluster), o)
        finally:
            cluster.shutdown()

    def create_enumerator(self, context: SplitEnumeratorContext) -> CassandraEnumerator:
        return CassandraEnumerator(self, context)

    def restore_enumerator(
        self, context: SplitEnumeratorContext, state: EnumeratorState[CassandraSplit, CassandraPosition]
    ) -> CassandraEnumerator:
        return CassandraEnumerator(self, context, state.position, state.pending)

    def create_split_reader(self) -> CassandraSplitReader:
        return CassandraSplitReader(self)

    def create_record_emitter(self) -> CassandraEmitter:
        _, _, schema, converters = self._metadata()
        return CassandraEmitter(schema, converters)

    def create_split_state(self, split: CassandraSplit) -> CassandraSplitState:
        return CassandraSplitState(split)

    def split_serializer(self) -> SimpleVersionedSerializer[CassandraSplit]:
        return CASSANDRA_SPLIT_SERIALIZER

    def position_serializer(self) -> SimpleVersionedSerializer[CassandraPosition]:
        return CASSANDRA_POSITION_SERIALIZER

    def is_transient(self, error: BaseException) -> bool:
        from cassandra import OperationTimedOut, ReadFailure, ReadTimeout, Unavailable
        from cassandra.cluster import NoHostAvailable
        from cassandra.connection import ConnectionException

        transient = (ReadTimeout, Unavailable, ReadFailure, OperationTimedOut, NoHostAvailable, ConnectionException,
                     CassandraConnectionError, CassandraTimeoutError, ConnectionError)
        return isinstance(error, transient) or super().is_transient(error)

    def push_predicates(self, predicates: Sequence[Predicate]) -> tuple[Mapping[str, str], Sequence[int]]:
        """Take what Cassandra serves without ALLOW FILTERING: equality or IN on every partition-key column
        (the scan becomes reads of those partitions), and then, clustering column by clustering column in order,
        equalities and finally one column's range. Anything else stays with Spark. The restriction is added to
        ``where`` and checked by preparing the query; if the server refuses it, nothing is pushed."""
        pk, selectors, _, _ = self._metadata()
        literal = {i: _cql_literal(p.value, self._kinds.get(p.column, ""), p.op) for i, p in enumerate(predicates)}
        usable = [i for i in literal if literal[i] is not None]

        def on(column: str, ops: set[str]) -> list[int]:
            return [i for i in usable if predicates[i].column == column and predicates[i].op in ops]

        taken: list[int] = []
        for column in pk:
            found = on(column, {"=", "in"})
            if not found:
                return {}, ()  # a partial partition key: the server would have to filter
            taken.append(found[0])
        for column in self._clustering:
            equal = on(column, {"="})
            if equal:
                taken.append(equal[0])
                continue
            taken.extend(on(column, {"<", "<=", ">", ">="}))
            break
        clauses = [f"{_quote(predicates[i].column)} {predicates[i].op.upper()} {literal[i]}" for i in taken]
        where = " AND ".join([self.options.where, *clauses] if self.options.where else clauses)
        cluster, session = connect(self.options, schema_metadata=False)
        try:
            _check_where(session, self._select(pk, selectors, where), where)
        except OptionsError as exc:
            log.info("not pushing %s to Cassandra: %s", where, exc)
            return {}, ()
        finally:
            cluster.shutdown()
        return {"where": where}, taken

    def volatile_columns(self) -> Sequence[str]:
        """The ``<col>_ttl`` columns: a TTL counts down between the copy and ``verify``."""
        self._metadata()
        return list(self._volatile)

    def identity(self) -> dict[str, Any]:
        o = self.options
        identity = {"connector": self.name, "keyspace": o.keyspace, "table": o.table, "columns": o.columns}
        # a partial export is another copy: its checkpoint is refused for another subset (absent when unset, so
        # the checkpoints of whole-table copies keep their fingerprint)
        if o.token_range:
            identity["token_range"] = o.token_range
        if o.where:
            identity["where"] = o.where
        for name in ("writetime_columns", "ttl_columns"):  # they add columns: another copy
            if getattr(o, name):
                identity[name] = getattr(o, name)
        return identity

    def origin(self) -> dict[str, Any]:
        """The cluster read (its ``cluster_name``) and the data centre read from: a checkpoint made against one
        cluster is refused against another that has a table of the same name."""
        self._metadata()
        return {"cluster": self._cluster_name, "local_dc": self.options.local_dc}

    def reference_rows(self) -> Iterator[tuple[Any, ...]]:
        """One plain scan of the table through the driver (see ``connectors.cassandra._reference``)."""
        _, selectors, schema, _ = self._metadata()
        # the plain columns, and WRITETIME()/TTL() as the read path asks for them: the values are the server's
        expressions = [_quote(n) if not s.startswith(("WRITETIME(", "TTL(")) else s
                       for n, s in zip(schema.names, selectors, strict=True)]
        cluster, session = connect(self.options, schema_metadata=False)
        try:
            yield from reference_rows(session, self.options.keyspace, self.options.table, expressions,
                                      self.options.fetch_size, self.restrictions())
        finally:
            cluster.shutdown()


ESTIMATE_REQUESTS_IN_FLIGHT = 32  # size estimate queries sent at once while planning (one per node)


def plan_ring(tokens: Iterable[int], replicas: Callable[[int], tuple[str, ...]], estimate_rows: Iterable[Any],
              bounds: tuple[int, int], o: CassandraOptions) -> tuple[PlanEntry, ...]:
    """The sized plan of a ring: its ranges (``tokens``), each range's replica set (``replicas(range end)``) and the
    nodes' ``system.size_estimates`` rows (range_start, range_end, mean_partition_size, partitions_count).
    Linear in the ring's size: a 1,000-node ring of 256 vnodes each plans in seconds (bench/bench_ring.py)."""
    with _no_gc():  # hundreds of thousands of small objects and no cycle: the collector's passes cost 30-40 %
        return _plan_ring(tokens, replicas, estimate_rows, bounds, o)


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _plan_ring(tokens: Iterable[int], replicas: Callable[[int], tuple[str, ...]], estimate_rows: Iterable[Any],
               bounds: tuple[int, int], o: CassandraOptions) -> tuple[PlanEntry, ...]:
    lo, hi = bounds
    ranges = ring_ranges(tokens, lo, hi)
    with_replicas = [(r, replicas(r.end)) for r in ranges]
    estimates: dict[TokenRange, int] = {}
    for range_start, range_end, mean_size, count in estimate_rows:
        size = int(mean_size) * int(count)
        for piece in _cut_at_bounds(int(range_start), int(range_end), lo, hi):
            estimates[piece] = estimates.get(piece, 0) + size
    if o.token_range:  # only the ring's parts inside token_range, their estimates in proportion
        with_replicas, estimates = _clip(with_replicas, estimates, o.token_intervals(lo, hi))
    if (not any(v > 0 for v in estimates.values()) and not o.splits
            and not CassandraSource._warned_empty_estimates):
        CassandraSource._warned_empty_estimates = True
        log.warning(
            "no size estimates for %s.%s yet (a fresh table, or estimates not refreshed): splitting by token "
            "width instead; run 'nodetool refreshsizeestimates' or set the 'splits' option",
            o.keyspace, o.table,
        )
    return build_plan(
        with_replicas, estimates, split_bytes=int(o.split_size_mb * 1024 * 1024),
        total_splits=o.splits, fallback_splits=max(32, len(with_replicas)),
    )


def gather_estimates(session: Any, hosts: Sequence[Any], options: CassandraOptions,
                     in_flight: int = ESTIMATE_REQUESTS_IN_FLIGHT) -> list[Any]:
    """Every node's own size estimates, asked of all nodes concurrently, at most ``in_flight`` at once (a
    thousand-node ring asked one by one waits a thousand round trips)."""
    from concurrent.futures import ThreadPoolExecutor

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(in_flight, len(hosts))),
                            thread_name_prefix="size-estimates") as pool:
        return [row for rows in pool.map(lambda host: _estimates_of(session, host, options), hosts) for row in rows]


def _estimates_of(session: Any, host: Any, options: CassandraOptions) -> list[Any]:
    """One node's own size estimates. Right after connecting, the driver may not have opened its pool to every
    node yet (it reports the node as down): retry within the connect timeout, then plan without that node's
    estimates (splits stay correct, only less balanced) rather than fail the read."""
    from cassandra.cluster import NoHostAvailable
    from cassandra.protocol import ErrorMessage

    deadline = time.monotonic() + options.connect_timeout_s
    while True:
        try:
            return list(session.execute(
                "SELECT range_start, range_end, mean_partition_size, partitions_count FROM system.size_estimates "
                "WHERE keyspace_name = %s AND table_name = %s",
                (options.keyspace, options.table),
                host=host,
            ))
        except (NoHostAvailable, ErrorMessage) as exc:
            if time.monotonic() >= deadline:
                log.warning("no size estimates from %s (%s): planning without them", host.endpoint, exc)
                return []
            time.sleep(0.2)


def _bounds(cluster: Any) -> tuple[int, int]:
    partitioner = str(cluster.metadata.partitioner).rsplit(".", 1)[-1]
    if partitioner not in PARTITIONERS:
        raise SplitSourceError(f"partitioner {partitioner} is not supported (Murmur3 and Random are)")
    return PARTITIONERS[partitioner]


def _clip(ranges: Sequence[tuple[TokenRange, tuple[str, ...]]], estimates: Mapping[TokenRange, int],
          wanted: Sequence[TokenRange]) -> tuple[list[tuple[TokenRange, tuple[str, ...]]], dict[TokenRange, int]]:
    """The parts of the ring's ``ranges`` inside ``wanted``, each with its replicas and the share of its range's
    estimate that its width is."""
    clipped: list[tuple[TokenRange, tuple[str, ...]]] = []
    sizes: dict[TokenRange, int] = {}
    for r, replicas in ranges:
        for w in wanted:
            part = TokenRange(max(r.start, w.start), min(r.end, w.end))
            if part.width > 0:
                clipped.append((part, replicas))
                if estimates.get(r, 0) > 0:
                    sizes[part] = estimates[r] * part.width // r.width
    return clipped, sizes


_WRITETIME_TYPE = pa.timestamp("us", tz="UTC")


def _cell_converter(arrow: pa.DataType) -> Any:
    """WRITETIME() (bigint microseconds) or TTL() (int seconds) values as an Arrow array."""
    if arrow == _WRITETIME_TYPE:
        return lambda values: pa.array(values, pa.int64()).cast(arrow)
    return lambda values: pa.array(values, arrow)


def _cell_metadata(cluster: Any, table: Any, options: CassandraOptions) -> list[tuple[str, str, str]]:
    """(``WRITETIME`` or ``TTL``, column, output name) for the ``writetime_columns`` and ``ttl_columns`` options;
    a clear error for a column Cassandra keeps no single write time or TTL for."""
    keys = {c.name for c in table.primary_key}
    udts = set(cluster.metadata.keyspaces[options.keyspace].user_types)

    def single_cell(column: str) -> bool:
        cql = str(table.columns[column].cql_type)
        return not cql.startswith(("list<", "set<", "map<")) and cql not in udts and cql != "counter"

    out: list[tuple[str, str, str]] = []
    for option_name, function, suffix in (("writetime_columns", "WRITETIME", "_writetime"),
                                          ("ttl_columns", "TTL", "_ttl")):
        text = getattr(options, option_name)
        if not text:
            continue
        if text == "*":
            columns = [c for c in table.columns if c not in keys and single_cell(c)]
        else:
            columns = [c.strip() for c in text.split(",") if c.strip()]
        for column in columns:
            if column not in table.columns:
                raise OptionsError(f"option '{option_name}': no column {column} in {options.keyspace}."
                                   f"{options.table}; columns: {', '.join(table.columns)}")
            if column in keys:
                raise OptionsError(f"option '{option_name}': {column} is a primary-key column; Cassandra keeps a "
                                   "write time and a TTL only for regular columns")
            if not single_cell(column):
                raise OptionsError(f"option '{option_name}': {column} is a {table.columns[column].cql_type} (not "
                                   "frozen), which has a write time and TTL per element, not one; Cassandra "
                                   f"refuses {function}() on it (freeze it, or leave it out)")
            name = f"{column}{suffix}"
            if name in table.columns:
                raise OptionsError(f"option '{option_name}': the table already has a column {name}")
            out.append((function, column, name))
    return out


def _prepare_metadata(session: Any, query: str, with_cells: bool) -> Any:
    """Prepare the metadata query; a server refusal of WRITETIME()/TTL() names the options."""
    from cassandra import InvalidRequest

    try:
        return session.prepare(query)
    except InvalidRequest as exc:
        if not with_cells:
            raise
        message = getattr(exc, "message", "") or str(exc)
        raise OptionsError(f"options 'writetime_columns'/'ttl_columns': Cassandra refuses them: {message}") from None


def _check_can_read(session: Any, options: CassandraOptions, pk: Sequence[str]) -> None:
    """Read one token of the table: a role that may not read it is refused here, before a copy claims its output,
    not in the middle of reading (preparing a query checks no permission). Only the token is read: no value the
    driver's default decoders could not hold."""
    from cassandra import Unauthorized

    try:
        session.execute(f"SELECT token({', '.join(_quote(c) for c in pk)}) FROM {_quote(options.keyspace)}."
                        f"{_quote(options.table)} LIMIT 1")
    except Unauthorized as exc:
        text = str(exc)
        found = re.search(r'message="(.*)"', text)
        message = found.group(1) if found else text.splitlines()[0]
        raise CassandraAuthorizationError(
            f"user '{options.username or '(none)'}' may not read {options.keyspace}.{options.table}: {message}; "
            f"GRANT SELECT ON TABLE {options.keyspace}.{options.table} (or its keyspace) TO that role") from None


_INTEGERS = frozenset({"int", "bigint", "smallint", "tinyint", "varint", "counter"})
_TEXTS = frozenset({"text", "varchar", "ascii"})


def _cql_literal(value: Any, cql_kind: str, op: str) -> str | None:
    """``value`` as a CQL literal for a column of ``cql_kind`` (``(a, b)`` for IN); None when it is not one this
    connector writes exactly (Spark keeps the filter)."""
    if op == "in":
        items = [_cql_literal(v, cql_kind, "=") for v in value]
        return None if not items or None in items else f"({', '.join(str(i) for i in items)})"
    if cql_kind in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if cql_kind in _TEXTS and isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if cql_kind == "boolean" and isinstance(value, bool):
        return "true" if value else "false"
    if cql_kind == "double" and isinstance(value, float) and math.isfinite(value):
        return repr(value)
    return None


def _check_where(session: Any, select: str, where: str) -> None:
    """Prepare the split query with ``where``: a restriction the server refuses (a column that needs ALLOW
    FILTERING, a typo) fails here, at planning, naming the option and quoting the server."""
    from cassandra import InvalidRequest
    from cassandra.protocol import SyntaxException

    try:
        prepared = session.prepare(select)
    except (InvalidRequest, SyntaxException) as exc:
        message = getattr(exc, "message", "") or str(exc)
        raise OptionsError(f"option 'where': Cassandra refuses {where!r}: {message}") from None
    if len(prepared.column_metadata) != 2:
        raise OptionsError(f"option 'where': {where!r} has bind markers (?); write the values into it")


def _cut_at_bounds(start: int, end: int, lo: int, hi: int) -> list[TokenRange]:
    """An estimate's range as ring pieces: a wrapping range ``(start, end]`` with end <= start is cut in two."""
    if end > start:
        return [TokenRange(start, end)]
    pieces = []
    if start < hi:
        pieces.append(TokenRange(start, hi))
    if end > lo:
        pieces.append(TokenRange(lo, end))
    return pieces
