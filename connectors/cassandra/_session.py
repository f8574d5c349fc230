"""Connecting to Cassandra: the driver's cluster and session from the options (protocol, login, TLS), and every way it
fails as one line."""

from __future__ import annotations

import atexit
import bisect
import dataclasses
import logging
import random
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from connectors.cassandra._options import PASSWORD_ENV, CassandraOptions
from splitsource import OptionsError, SplitSourceError

__all__ = [
    "CassandraAuthenticationError",
    "CassandraAuthorizationError",
    "CassandraConnectionError",
    "CassandraSchemaError",
    "CassandraTimeoutError",
    "CassandraUnavailableError",
    "RangeReplicas",
    "range_replicas_first",
    "check_tls_options",
    "connect",
    "shared_session",
    "table_metadata",
    "tls_context",
]

log = logging.getLogger("splitsource.cassandra")


class CassandraConnectionError(SplitSourceError, ConnectionError):
    """Cassandra could not be reached, refused the credentials, or has no such keyspace or table."""


class CassandraAuthenticationError(CassandraConnectionError, OptionsError):
    """Cassandra refused the login (a wrong user or password, or none given where one is required): a usage
    error (exit 2)."""


class CassandraAuthorizationError(CassandraConnectionError, OptionsError):
    """The role logged in may not read the table (no ``SELECT`` permission): a usage error (exit 2)."""


class CassandraSchemaError(CassandraConnectionError, OptionsError):
    """The cluster has no keyspace or table of the name the options give: a usage error (exit 2)."""


class CassandraUnavailableError(SplitSourceError):
    """Too few replicas alive for the read's consistency, or no live node in ``local_dc``: transient, retried by the
    framework until its budget runs out."""


class CassandraTimeoutError(SplitSourceError):
    """A page timed out at the smallest page size (``min_fetch_size``): transient, retried by the framework."""


# options that shape a read, not its connection: reads that differ only in them share a session
_READ_FIELDS = frozenset({"keyspace", "table", "columns", "consistency", "fetch_size", "min_fetch_size",
                          "split_size_mb", "splits", "token_range", "where", "writetime_columns", "ttl_columns",
                          "timestamp_unit"})
_SHARED: dict[tuple[Any, ...], tuple[Any, Any]] = {}
_OPENED: list[Any] = []  # every cluster shared_session opened, replaced ones included: shut down at exit
_SHARED_LOCK = threading.Lock()


def shared_session(options: CassandraOptions, *, schema_metadata: bool = False, renew: bool = False
                   ) -> tuple[Any, Any]:
    """This process's (cluster, session) for ``options``' connection: opened by the first caller that asks and
    shared by every later one, whatever table it reads, shut down when the process exits. Users must not shut it
    down. Readers come and go per task, and planning and the schema come once per source: sharing, a node that
    hangs costs one connect timeout per process, not one per reader and planning step. ``schema_metadata``: a
    session of its own that keeps the driver's schema and ring (the schema and planning; see
    :func:`table_metadata`), apart from the readers' lighter one.

    A session whose every node the driver holds down (the cluster restarted while a long-lived process, a
    notebook, kept it), or one the caller found broken (``renew``), is replaced by a new one, which connects now
    instead of at the driver's next scheduled reconnection. An old schema session is shut down (no caller keeps
    one); an old readers' session stays open for readers that hold it, until the process exits."""
    key = (schema_metadata, *(getattr(options, f.name) for f in dataclasses.fields(options)
                              if f.name not in _READ_FIELDS))
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if renew or found is None or found[0].is_shutdown \
                or all(h.is_up is False for h in found[0].metadata.all_hosts()):
            if not _OPENED:
                atexit.register(_shut_down_shared)
            _SHARED.pop(key, None)  # gone before connecting, so a connect that fails leaves no half-replaced entry
            if found is not None and schema_metadata:
                found[0].shutdown()  # or its control connection goes on reconnecting to what may be gone
                _OPENED.remove(found[0])
            found = _SHARED[key] = connect(options, schema_metadata=schema_metadata)
            _OPENED.append(found[0])
        return found


def _shut_down_shared() -> None:
    with _SHARED_LOCK:
        for cluster in _OPENED:
            cluster.shutdown()
        _OPENED.clear()
        _SHARED.clear()


def connect(options: CassandraOptions, *, schema_metadata: bool = True) -> tuple[Any, Any]:
    """A (cluster, session) pair of its own, for the caller to shut down; every failure becomes one clear
    :class:`CassandraConnectionError`."""
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
        # the control connection may have reached a node of another data centre: then the driver knows the ring
        dc_problem = _local_dc_problem(options.local_dc, list(cluster.metadata.all_hosts()))
        cluster.shutdown()
        if dc_problem is not None:
            raise dc_problem from None
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
    dc_problem = _local_dc_problem(options.local_dc, list(cluster.metadata.all_hosts()))
    if dc_problem is not None:
        cluster.shutdown()
        raise dc_problem
    return cluster, session


def _local_dc_problem(local_dc: str, hosts: Sequence[Any]) -> SplitSourceError | None:
    """Why ``local_dc`` cannot be read from: not a data centre of the cluster (a usage error), or none of its nodes
    up; None if it can, or if no ``local_dc`` is set. The driver would otherwise fail every query with an empty
    NoHostAvailable."""
    if not local_dc:
        return None
    centres = sorted({str(h.datacenter) for h in hosts if h.datacenter})
    if local_dc not in centres:
        return OptionsError(f"option 'local_dc': '{local_dc}' is not a data centre of this cluster; its data "
                            f"centres: {', '.join(centres) or '(none known)'}")
    if not any(h.is_up is not False for h in hosts if h.datacenter == local_dc):
        # the driver leaves other data centres' nodes alone (their state unknown): list those not known down
        others = sorted(f"{h.address} ({h.datacenter})" for h in hosts
                        if h.datacenter != local_dc and h.is_up is not False)
        return CassandraUnavailableError(
            f"no node of data centre '{local_dc}' (local_dc) is up to read from; nodes elsewhere: "
            f"{', '.join(others) or 'none'}; bring one back, or read from another data centre with local_dc")
    return None


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
                load_balancing_policy=range_replicas_first(
                    TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=options.local_dc or None))),
                request_timeout=options.request_timeout_s,
                row_factory=tuple_factory,
            )
        },
        connect_timeout=options.connect_timeout_s,
        control_connection_timeout=options.connect_timeout_s,
        **kwargs,
    )


def table_metadata(options: CassandraOptions) -> tuple[Any, Any, Any]:
    """(cluster, session, table): the process's schema session (:func:`shared_session`) and the driver's metadata
    of the table ``options`` name, read again from the server first: a shared cluster's copy follows schema
    changes only by events, a second or two late, and a table just made or altered must be read as it is now. A
    session that cannot read it (its node gone, another started at its address) is renewed once."""
    from cassandra import DriverException

    for renew in (False, True):
        cluster, session = shared_session(options, schema_metadata=True, renew=renew)
        try:
            cluster.refresh_keyspace_metadata(options.keyspace)
            if options.keyspace in cluster.metadata.keyspaces:
                cluster.refresh_table_metadata(options.keyspace, options.table)
            break
        except DriverException as exc:
            if renew:
                raise CassandraConnectionError(f"cannot read the schema of {options.keyspace}.{options.table} "
                                               f"from Cassandra at {options.hosts}: {exc}") from None
    keyspace = cluster.metadata.keyspaces.get(options.keyspace)
    if keyspace is None:
        raise CassandraSchemaError(
            f"option 'keyspace': keyspace '{options.keyspace}' does not exist at {options.hosts}"
        )
    table = keyspace.tables.get(options.table)
    if table is None:
        raise CassandraSchemaError(
            f"option 'table': table '{options.keyspace}.{options.table}' does not exist; tables: "
            f"{', '.join(sorted(keyspace.tables)) or '(none)'}"
        )
    return cluster, session, table


def range_replicas_first(child: Any) -> Any:
    """A load-balancing policy that sends a statement carrying ``replicas`` (the hosts holding its token range) to
    those replicas first, the live ones of the local data centre in random order, then to the rest of ``child``'s
    plan; any other statement goes by ``child``.

    A range read coordinated by a replica reads that replica (production snitches sort the coordinator first), so a
    replica that dies costs only the requests it coordinated, which the driver sends on to the next host at once: a
    coordinator that is not a replica would wait for the dead one until the cluster's failure detector convicts it
    (10-20 s measured here), then time out.
    """
    from cassandra.policies import HostDistance, LoadBalancingPolicy

    class RangeReplicasFirstPolicy(LoadBalancingPolicy):
        def __init__(self) -> None:
            super().__init__()
            self.child = child

        def populate(self, cluster: Any, hosts: Any) -> None:
            self.child.populate(cluster, hosts)

        def check_supported(self) -> None:
            self.child.check_supported()

        def distance(self, host: Any) -> Any:
            return self.child.distance(host)

        def make_query_plan(self, working_keyspace: Any = None, query: Any = None) -> Iterator[Any]:
            replicas = getattr(query, "replicas", None)
            if not replicas:
                yield from self.child.make_query_plan(working_keyspace, query)
                return
            first = [h for h in replicas if h.is_up and self.child.distance(h) == HostDistance.LOCAL]
            random.shuffle(first)
            yield from first
            for host in self.child.make_query_plan(working_keyspace, query):
                if host not in first:
                    yield host

        def on_up(self, host: Any) -> None:
            self.child.on_up(host)

        def on_down(self, host: Any) -> None:
            self.child.on_down(host)

        def on_add(self, host: Any) -> None:
            self.child.on_add(host)

        def on_remove(self, host: Any) -> None:
            self.child.on_remove(host)

    return RangeReplicasFirstPolicy()


class RangeReplicas:
    """The hosts that hold each token range of a keyspace, from the driver's token map (kept current by the driver)
    and the keyspace's replication (read once): a reader's session runs without the driver's schema metadata."""

    def __init__(self, cluster: Any, session: Any, keyspace: str) -> None:
        from cassandra.metadata import ReplicationStrategy

        self._cluster = cluster
        row = session.execute("SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                              (keyspace,)).one()
        replication = dict(row[0]) if row is not None else {}
        strategy_class = replication.pop("class", "")
        self._strategy = ReplicationStrategy.create(strategy_class, replication) if strategy_class else None
        self._built_for: Any = None
        self._by_token: dict[Any, list[Any]] = {}
        self._ring: list[Any] = []

    def of(self, end: int) -> list[Any]:
        """The replicas of the range ending at token ``end`` (empty when the driver has no token map)."""
        token_map = self._cluster.metadata.token_map
        if token_map is None or self._strategy is None:
            return []
        if self._built_for is not token_map:  # the driver replaces its token map when the ring changes
            self._by_token = self._strategy.make_token_replica_map(token_map.token_to_host_owner, token_map.ring)
            self._ring = token_map.ring
            self._built_for = token_map
        if not self._ring:
            return []
        point = bisect.bisect_left(self._ring, token_map.token_class(end))
        return list(self._by_token.get(self._ring[point % len(self._ring)], ()))
