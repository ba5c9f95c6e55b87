"""What an operator does beside a steady PostgreSQL queue when the server's autovacuum is off.

docs/architecture.md ("What it costs, and vacuum") says to run ``VACUUM <schema>.jobs`` every
few minutes wherever autovacuum is off, as it is on this CI server. A steady-load run makes a
few dead rows per job (each job's row is updated on its way to done); without autovacuum the
claim's index walk and the table grow with them, and transaction mode's median latency rose
steadily over a two-minute run (9 ms to 48 ms), which no fault caused. So a steady run
vacuums the queue's table every ``EVERY`` seconds while the server's autovacuum is off, as
autovacuum would, and the report says so.
"""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

EVERY = 10.0  # s between VACUUMs (autovacuum's naptime is 60 s, but acts on every table due)


class Vacuum:
    """A thread that runs VACUUM on ``table`` every EVERY seconds until stopped."""

    def __init__(self, dsn: str, table: sql.Identifier) -> None:
        self.dsn, self.table = dsn, table
        self.runs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="steady-vacuum", daemon=True)

    @staticmethod
    def needed(dsn: str) -> bool:
        """Whether the server's autovacuum is off."""
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT current_setting('autovacuum')").fetchone()
        return row is not None and row[0] == "off"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.wait(EVERY):
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    conn.execute("SET statement_timeout = '30s'")
                    conn.execute(sql.SQL("VACUUM {}").format(self.table))
                self.runs += 1
            except psycopg.Error:  # the server is full or away (a fault of the run): next time
                continue
