"""The Cassandra connector's options: one frozen dataclass parsed once from Spark's string options; the
table of them is ``splitsource options --connector cassandra`` (and docs/cassandra.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from connectors.cassandra._tokens import TokenRange
from splitsource import OptionsError, Secret, name_list, option

__all__ = ["CassandraOptions", "HOSTS_ENV", "MIN_SPLIT_SIZE_MB", "PASSWORD_ENV"]


_CONSISTENCY = ("ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE")
MIN_SPLIT_SIZE_MB = 1.0
PASSWORD_ENV = "SPLITSOURCE_CASSANDRA_PASSWORD"
HOSTS_ENV = "SPLITSOURCE_CASSANDRA_HOSTS"  # contact points when option hosts is not given (each process reads it)


@dataclass(frozen=True)
class CassandraOptions:
    keyspace: str = option(doc="keyspace of the table")
    table: str = option(doc="table to read")
    hosts: str = option("", doc=f"comma-separated contact points (empty: ${HOSTS_ENV}, else 127.0.0.1)")
    port: int = option(9042, doc="CQL port", minimum=1, maximum=65535)
    local_dc: str = option("", doc="data center to read from")
    columns: tuple[str, ...] = option((), doc="comma-separated projection, each column once (empty: all)",
                                      parse=name_list, shown="")
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
    timestamp_unit: str = option("us", doc="unit of timestamp columns: us (timestamp[us], what Spark, Parquet's "
                                           "readers and tables hold: years -290308..294247) or ms (timestamp[ms]: "
                                           "the whole CQL range, for --format jsonl or csv)", choices=("us", "ms"))
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

    def __post_init__(self) -> None:
        if not self.hosts.strip():
            object.__setattr__(self, "hosts", os.environ.get(HOSTS_ENV, "").strip() or "127.0.0.1")

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
