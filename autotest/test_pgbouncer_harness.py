# SPDX-License-Identifier: MIT
"""The PgBouncer that the tests and bench/ put in front of PostgreSQL (autotest/pgbouncer.py)
must keep serving for as many connections as a run makes. It once sent its log to a pipe
nobody read: after some 200 connections the pipe was full, PgBouncer blocked on it, and every
later client timed out (the tile benchmark failed that way at 6 rounds). Its Unix socket is the
setup docs/operations.md recommends."""

import psycopg

from idem_testlib import (Ledger, _pg_dsn, env_with, make_source, pg_fresh_database, run,
                          warp_reporting)
from pgbouncer import DEFAULT_RESET_QUERY, PgBouncer


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


def _warp_tiles(src, tmp_path, dsn, count, tag):
    """`count` new pieces of work through the ledger at `dsn`, one process each; returns how many
    of its statements each found prepared in its server session (the driver's _DEBUG_ report)."""
    found = []
    for i in range(count):
        out = tmp_path / f"{tag}_{i}.tif"
        _, report = warp_reporting(["gdalwarp", "-q", "-of", "IDEM", "-t_srs", "EPSG:3857", "-ts",
                                    "64", "64", src, "/vsiidem/" + str(out)],
                                   env=env_with(IDEM_LEDGER=dsn))
        assert out.exists()
        found.append(int(report["LEDGER_STATEMENTS_FOUND_PREPARED"]))
    return found


def _statement_runs(pooled_dsn):
    """The ledger's statements prepared in the pool's one server session: base name -> how many
    times they ran (PostgreSQL's count of custom and generic plans)."""
    with psycopg.connect(pooled_dsn) as conn:
        rows = conn.execute("SELECT name, generic_plans + custom_plans FROM pg_prepared_statements "
                            "WHERE name LIKE 'idem\\_%'").fetchall()
    runs = {}
    for name, count in rows:
        base = name.rsplit("_", 1)[0]
        runs.setdefault(base, []).append(count)
    return runs


def test_a_session_that_keeps_prepared_statements_serves_later_workers(tmp_path):
    """docs/operations.md's PgBouncer (server_reset_query = RESET ALL) keeps a server session's
    prepared statements between clients. The first worker prepares its completion while its work
    runs; the next finds it there and prepares its claim too (the form that does not wait for
    the flush, idem_claim_unless_deferred: the driver confirms its claims); from the third on
    both run prepared, parsed once for the session. Statements are named after a hash of their
    text, so once PostGIS is dropped (no footprint column: another claim statement) the claim
    found is not used, and the work still completes."""
    dsn = pg_fresh_database()
    ledger = Ledger("postgresql", dsn, lambda: psycopg.connect(dsn))
    bouncer = PgBouncer(_pg_dsn(), pool_size=1).start()  # one server session for every worker
    try:
        pooled = bouncer.socket_dsn_for(dsn)
        src = make_source(tmp_path / "src.tif")
        found = _warp_tiles(src, tmp_path, pooled, 4, "kept")
        assert found[0] == 0
        assert all(count > 0 for count in found[1:]), found
        runs = _statement_runs(pooled)
        assert runs["idem_complete_async"] == [4]
        assert runs["idem_claim_unless_deferred"] == [2]
        assert len(ledger.completed()) == 4

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP EXTENSION postgis CASCADE")
        _warp_tiles(src, tmp_path, pooled, 3, "no_postgis")
        runs = _statement_runs(pooled)
        assert runs["idem_complete_async"] == [7]
        # The claim with a footprint ran no more; the one without it was prepared by the first
        # worker after the drop and ran for the next two.
        assert sorted(runs["idem_claim_unless_deferred"]) == [2, 2]
        assert len(ledger.completed()) == 7
        assert all("footprint" not in row for row in ledger.rows())  # the column went too
    finally:
        bouncer.stop()


def test_a_session_reset_with_discard_all_prepares_nothing_for_later_workers(tmp_path):
    """PgBouncer's default reset, DISCARD ALL (a pooler shared with other applications), drops
    prepared statements: each worker finds none, prepares only the completion it runs itself,
    and completes as usual."""
    dsn = pg_fresh_database()
    ledger = Ledger("postgresql", dsn, lambda: psycopg.connect(dsn))
    bouncer = PgBouncer(_pg_dsn(), pool_size=1, reset_query=DEFAULT_RESET_QUERY).start()
    try:
        pooled = bouncer.socket_dsn_for(dsn)
        src = make_source(tmp_path / "src.tif")
        found = _warp_tiles(src, tmp_path, pooled, 3, "discarded")
        assert found == [0, 0, 0]
        assert _statement_runs(pooled) == {}
        assert len(ledger.completed()) == 3
    finally:
        bouncer.stop()
