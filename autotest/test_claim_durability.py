# SPDX-License-Identifier: MIT
"""A PostgreSQL ledger's claim commits without waiting for its flush, and the worker publishes only
once the claim is durable (docs/ledger.md, confirm_claim; docs/operations.md). To hold a commit's
durability back for as long as a test needs, the cluster is given a synchronous standby that
never connects: every commit made with synchronous_commit = on then waits, in the server, until
the setting is removed. A commit made with synchronous_commit off or local does not wait."""

import contextlib
import functools
import os
import subprocess
import time
import uuid

import psycopg
import pytest
from osgeo import gdal

from idem_testlib import (ROOT, as_gdal_warp, reports_of, _pg_dsn, env_with,  # noqa: F401
                          make_ledger, make_source, run, temp_dirs_beside, wait_until)
from idem_testlib import wait_until
from idem_testlib import warp_cmd as shared_warp_cmd


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=512)


warp_cmd = functools.partial(shared_warp_cmd, through_vsiidem=True)


def admin_execute(sql, params=()):
    """One statement as the cluster's superuser; its rows, if it returns any. Its own commit
    never waits for the standby."""
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        conn.execute("SET synchronous_commit = local")
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else None


def set_standby_names(names):
    """Set (or, with None, reset) synchronous_standby_names and wait until the server uses it."""
    if names:
        admin_execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    else:
        admin_execute("ALTER SYSTEM RESET synchronous_standby_names")
    admin_execute("SELECT pg_reload_conf()")
    wait_until(lambda: admin_execute("SHOW synchronous_standby_names")[0][0] == (names or ""),
               "the server to reload synchronous_standby_names")


@contextlib.contextmanager
def commits_held_back():
    """Commits that wait for their durability wait until the block ends."""
    set_standby_names("idem_ghost")
    try:
        yield
    finally:
        set_standby_names(None)


CONFIRMATION = "BEGIN;SELECT pg_logical_emit_message(true, 'gdal-idem', '');COMMIT;"


def waiting_for_durability(query_start):
    """Server processes whose commit waits for the standby, running a query that begins so."""
    rows = admin_execute("SELECT pid, query FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
    return [pid for pid, query in rows if query.startswith(query_start)]


class Worker:
    """A gdalwarp command run as gdal.Warp in a process of its own, which reports reaching the
    point where it confirms its claim (a file appears) and, at its end, the IDEM driver's _DEBUG_
    report (docs/configuration.md)."""

    def __init__(self, cmd, env, marker_dir):
        assert cmd[0] == "gdalwarp"
        self.confirming = os.path.join(str(marker_dir), f"confirming-{uuid.uuid4().hex[:8]}")
        env = dict(env, IDEM_TEST_PAUSE_AT="before_confirm", IDEM_TEST_PAUSE_SECONDS="0",
                   IDEM_TEST_REACHED_FILE=self.confirming)
        self.proc = subprocess.Popen([str(c) for c in as_gdal_warp(cmd)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def reached_confirmation(self):
        """Whether the warp ran and the worker came to confirm its claim."""
        return os.path.exists(self.confirming)

    def finish(self, timeout=120):
        """The exit status, stderr, and the driver's report of the call."""
        stdout, stderr = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, stderr, reports_of(stdout, "_DEBUG_")


@pytest.fixture(params=["postgresql", "pgbouncer"])
def pg_ledger(request, tmp_path, source):
    ledger = make_ledger(request.param, tmp_path)
    # The schema is made (and the server sessions warmed) before any test holds commits back.
    run(warp_cmd(source, tmp_path / "first.tif"), env=env_with(IDEM_LEDGER=ledger.dsn),
        check=True)
    return ledger


def rows_for(ledger, out):
    return ledger.rows("output_uri = %s", (str(out),))


@contextlib.contextmanager
def worker_waiting_for_its_confirmation(ledger, src, out):
    """A worker whose warp ran and whose claim's confirmation waits in the server, for as long
    as the block runs."""
    with commits_held_back():
        worker = Worker(warp_cmd(src, out), env_with(IDEM_LEDGER=ledger.dsn),
                        os.path.dirname(str(out)))
        try:
            # The claim did not wait, so the warp ran; the claim's confirmation, sent right
            # after it, waits in the server.
            wait_until(worker.reached_confirmation, "the warp", timeout=30)
            wait_until(lambda: waiting_for_durability(CONFIRMATION),
                       "the claim's confirmation to wait for the standby", timeout=30)
            yield worker
        except BaseException:
            worker.proc.kill()
            raise


def test_the_worker_publishes_only_once_its_claim_is_durable(pg_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    with worker_waiting_for_its_confirmation(pg_ledger, source, out) as worker:
        # What must not happen has no event to wait for: the worker is given a second to do it.
        time.sleep(1.0)
        assert worker.proc.poll() is None
        assert not out.exists(), "the output was published under a claim not yet durable"
        rows = rows_for(pg_ledger, out)
        assert len(rows) == 1 and rows[0]["completed_at"] is None and rows[0]["attempt"] == 1
    rc, stderr, report = worker.finish()
    assert rc == 0, stderr
    assert report["LEDGER_CLAIMS_CONFIRMED_BY_REWRITE"] == "0"  # confirmed ahead
    assert gdal.Open(str(out)).RasterXSize > 0
    rows = rows_for(pg_ledger, out)
    assert len(rows) == 1 and rows[0]["completed_at"] is not None


def test_a_claim_the_ledger_lost_before_its_confirmation_publishes_nothing(pg_ledger, source,
                                                                           tmp_path):
    out = tmp_path / "out.tif"
    with worker_waiting_for_its_confirmation(pg_ledger, source, out) as worker:
        # What a crash of the server before the claim's flush leaves: no claim, and the
        # connection that would have confirmed it gone.
        conn = pg_ledger.connect()
        try:
            conn.execute("SET synchronous_commit = local")
            conn.execute("DELETE FROM idem.ledger WHERE output_uri = %s", (str(out),))
            conn.commit()
        finally:
            conn.close()
        for pid in waiting_for_durability(CONFIRMATION):
            admin_execute("SELECT pg_terminate_backend(%s)", (pid,))
        rc, stderr, report = worker.finish()
    assert rc != 0
    assert "the ledger no longer has the claim on this work" in stderr
    assert report["OUTCOME"] == "FAILED"
    assert report["LEDGER_CLAIMS_CONFIRMED_BY_REWRITE"] == "1"
    assert not out.exists()
    assert temp_dirs_beside(out) == []
    assert rows_for(pg_ledger, out) == []
    # The work is done by the next run.
    run(warp_cmd(source, out), env=env_with(IDEM_LEDGER=pg_ledger.dsn), check=True)
    assert len(rows_for(pg_ledger, out)) == 1 and gdal.Open(str(out)) is not None


def test_a_confirmation_lost_with_its_connection_is_made_again(pg_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    with worker_waiting_for_its_confirmation(pg_ledger, source, out) as worker:
        for pid in waiting_for_durability(CONFIRMATION):
            admin_execute("SELECT pg_terminate_backend(%s)", (pid,))
        # On a new connection the claim's row is rewritten, and that commit waits in turn.
        wait_until(lambda: waiting_for_durability("UPDATE idem.ledger SET lease_expires_at = "
                                                  "lease_expires_at"),
                   "the second confirmation to wait for the standby", timeout=30)
        assert worker.proc.poll() is None
        assert not out.exists()
    rc, stderr, report = worker.finish()
    assert rc == 0, stderr
    assert report["LEDGER_CLAIMS_CONFIRMED_BY_REWRITE"] == "1"
    rows = rows_for(pg_ledger, out)
    assert len(rows) == 1 and rows[0]["completed_at"] is not None and rows[0]["attempt"] == 1
    assert gdal.Open(str(out)) is not None


def test_durable_claim_waits_for_the_flush_before_any_work(pg_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    with commits_held_back():
        worker = Worker(warp_cmd(source, out),
                        env_with(IDEM_LEDGER=pg_ledger.dsn, IDEM_DURABLE_CLAIM="YES"), tmp_path)
        # The claim's own commit waits in the server: the worker is inside the claim.
        wait_until(lambda: waiting_for_durability("WITH current AS"),
                   "the claim to wait for the standby", timeout=30)
        assert worker.proc.poll() is None
        assert not worker.reached_confirmation()  # no warp ran
    rc, stderr, _ = worker.finish()
    assert rc == 0, stderr
    assert rows_for(pg_ledger, out)[0]["completed_at"] is not None


def test_a_worker_that_may_not_emit_the_message_confirms_by_rewriting_its_row(source, tmp_path):
    """A server that revokes pg_logical_emit_message from the workers (docs/ledger.md): each claim
    is confirmed by rewriting its row, and the work is published as usual."""
    ledger = make_ledger("postgresql", tmp_path)
    run(warp_cmd(source, tmp_path / "first.tif"), env=env_with(IDEM_LEDGER=ledger.dsn),
        check=True)  # the schema, made by its owner
    login = "idem_nomsg_" + uuid.uuid4().hex[:8]
    with open(os.path.join(ROOT, "sql", "postgres", "worker_role.sql")) as f:
        worker_role_sql = f.read()
    with psycopg.connect(ledger.dsn, autocommit=True) as conn:
        conn.execute(worker_role_sql)
        conn.execute(f"CREATE ROLE {login} LOGIN PASSWORD 'Secret-1' IN ROLE idem_worker")
        # Every overload (PostgreSQL 17 added a `flush` argument to each).
        signatures = conn.execute("SELECT oid::regprocedure::text FROM pg_proc "
                                  "WHERE proname = 'pg_logical_emit_message'").fetchall()
        assert signatures
        for (signature,) in signatures:
            conn.execute(f"REVOKE EXECUTE ON FUNCTION {signature} FROM PUBLIC")
    dsn = " ".join(part for part in ledger.dsn.split()
                   if not part.startswith(("user=", "password="))) + \
        f" user={login} password=Secret-1"
    out = tmp_path / "out.tif"
    try:
        rc, stderr, report = Worker(warp_cmd(source, out), env_with(IDEM_LEDGER=dsn),
                                    tmp_path).finish()
    finally:
        with psycopg.connect(ledger.dsn, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {login}")
    assert rc == 0, stderr
    assert report["LEDGER_CLAIMS_CONFIRMED_BY_REWRITE"] == "1"
    rows = rows_for(ledger, out)
    assert len(rows) == 1 and rows[0]["completed_at"] is not None
    assert gdal.Open(str(out)).RasterXSize > 0
