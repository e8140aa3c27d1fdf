"""The PgBouncer that the tests and bench/ put in front of PostgreSQL (autotest/pgbouncer.py)
must keep serving for as many connections as a run makes. It once sent its log to a pipe
nobody read: after some 200 connections the pipe was full, PgBouncer blocked on it, and every
later client timed out (the tile benchmark failed that way at 6 rounds)."""

import psycopg

from idem_testlib import _pg_dsn
from pgbouncer import PgBouncer


def test_pgbouncer_serves_hundreds_of_connections_one_after_another():
    upstream = _pg_dsn()
    bouncer = PgBouncer(upstream, pool_size=2).start()
    try:
        dsn = bouncer.dsn_for(upstream)
        for i in range(400):
            with psycopg.connect(dsn, connect_timeout=5) as conn:
                assert conn.execute("SELECT %s::int", (i,)).fetchone()[0] == i
    finally:
        bouncer.stop()
