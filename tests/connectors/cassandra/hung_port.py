"""A lost Cassandra node's CQL port that takes connections and never says a word: a machine that hangs behind a
firewall that drops packets (shared by the replica tests and bench/bench_hung_node.py)."""

from __future__ import annotations

import socket
import threading


class HungPort:
    """Accepts every connection on ``address:port`` and answers nothing; each connection is closed after
    ``hold_s`` (None: only at :meth:`close`). ``accepted`` counts the connections taken."""

    def __init__(self, address: str, port: int = 9042, hold_s: float | None = 1.0) -> None:
        self.accepted = 0
        self._hold_s = hold_s
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._socket = socket.create_server((address, port))
        self._socket.settimeout(0.1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            if self._hold_s is None:
                self._held.append(conn)
            else:
                threading.Timer(self._hold_s, conn.close).start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        for conn in self._held:
            conn.close()
        self._socket.close()
