"""The PgBouncer that the tests and bench/ put in front of PostgreSQL (autotest/pgbouncer.py)
must keep serving for as many connections as a run makes. It once sent its log to a pipe
nobody read: after some 200 connections the pipe was full, PgBouncer blocked on it, and every
later client timed out (the tile benchmark failed that way at 6 rounds). Its Unix socket is the
setup docs/operations.md recommends."""

import psycopg

from idem_testlib import Ledger, _pg_dsn, env_with, make_source, pg_fresh_database, run
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


def test_driver_works_through_pgbouncer_unix_socket(tmp_path):
    """The setup docs/operations.md recommends to workers that start a process per tile (and
    bench/s3_bench.py measures): a PgBouncer on the worker, reached over its Unix socket."""
    dsn = pg_fresh_database()
    ledger = Ledger("postgresql", dsn, lambda: psycopg.connect(dsn))
    bouncer = PgBouncer(_pg_dsn(), pool_size=2).start()
    try:
        socket_dsn = bouncer.socket_dsn_for(dsn)
        assert socket_dsn.startswith("host=/")
        src = make_source(tmp_path / "src.tif")
        out = tmp_path / "out.tif"
        args = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857",
                "-ts", "64", "64", src, "/vsiidem/" + str(out)]
        env = env_with(IDEM_LEDGER=socket_dsn)
        first = run(args, env=env)
        assert first.returncode == 0, first.stderr
        assert out.exists()
        assert len(ledger.completed()) == 1
        again = run(args, env=env)
        assert again.returncode == 0, again.stderr
        assert "IDEM: skipped" in again.stderr
        assert ledger.completed()[0]["attempt"] == 1
    finally:
        bouncer.stop()
