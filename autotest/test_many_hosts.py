# SPDX-License-Identifier: MIT
"""Workers on several hosts (autotest/hosts.py: network namespaces on a private bridge): a database
host (PostgreSQL + PostGIS, PgBouncer), a storage host (moto's S3 server, versioned buckets, and
the tests' GCS store) and three worker hosts, each running a batch of IDEM tiles to /vsis3/ (or
/vsigs/) against the one ledger (autotest/hosts_batch.py: each tile retried after a failure, as an
orchestrator does).

Each test injects one fault, lets the batches finish, and then checks what users rely on:
every tile completed exactly once in the ledger; every object equal to plain gdalwarp's output;
no completed row without its object (`gdal-idem verify`), no object at a final key without its
completed row; and the batch converges: run again on every host, it changes no row and uploads
nothing. Pause points and the ledger's own clock synchronise the faults, never sleeps."""

import json
import os
import pathlib
import sys
import time
import uuid

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, env_with, gdal_config, make_source, read_pixels, run,
                          wait_until)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hosts  # noqa: E402
from hosts_batch import WARP  # noqa: E402

BATCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hosts_batch.py")
LEASE = 5  # IDEM_STALE_SECONDS of the workers
GRID = (4, 3)  # 12 tiles

_why_not = hosts.missing()
pytestmark = pytest.mark.skipif(_why_not is not None, reason=f"no hosts here: {_why_not}")

# The test matrix's share (IDEM_TEST_SHARE=smoke, conftest.py) runs the baseline and the cut-off
# worker only. A mark, not a fixture: the others are skipped before the hosts are built.


@pytest.fixture(scope="module")
def net():
    hosts.Network.sweep_stale()
    network = hosts.Network()
    try:
        network.db = network.add(hosts.DbHost, "db")
        network.store = network.add(hosts.StorageHost, "s3")
        network.workers = [network.add(hosts.Host, f"w{i}") for i in (1, 2, 3)]
        yield network
    finally:
        network.close()


class Case:
    """One test's batch: a database of its own on the database host, a prefix of its own in the
    bucket, the source, and the plain gdalwarp output of every tile."""

    def __init__(self, net, tmp_path, through_pgbouncer):
        self.net = net
        self.tmp = tmp_path
        self.database = "t" + uuid.uuid4().hex[:10]
        net.db.psql(f'CREATE DATABASE "{self.database}"')
        self.dsn = net.db.dsn(through_pgbouncer).replace(
            f"dbname={net.db.DATABASE}", f"dbname={self.database}")
        self.local_dsn = net.db.local_dsn().replace(
            f"dbname={net.db.DATABASE}", f"dbname={self.database}")
        self.prefix = f"/{net.store.scheme()}/{net.store.BUCKET}/{self.database}"
        self.source = source = make_source(tmp_path / "scene.tif", size=256)
        extent = gdal.Warp("", source, format="VRT", dstSRS="EPSG:3857")
        x0, dx, _, y0, _, dy = extent.GetGeoTransform()
        width, height = dx * extent.RasterXSize, -dy * extent.RasterYSize
        extent = None
        cols, rows = GRID
        self.tiles = {f"{i}_{j}": [x0 + i * width / cols, y0 - (j + 1) * height / rows,
                                   x0 + (i + 1) * width / cols, y0 - j * height / rows]
                      for i in range(cols) for j in range(rows)}
        self.batch = tmp_path / "batch.json"
        self.batch.write_text(json.dumps({"source": source, "tiles": self.tiles,
                                          "prefix": self.prefix}))
        self.env = env_with(IDEM_LEDGER=self.dsn, IDEM_STALE_SECONDS=LEASE, IDEM_ON_BUSY="WAIT",
                            **net.store.config())
        self.pause_dir = tmp_path / "pause"
        self.pause_dir.mkdir()
        self.runs = 0
        self.report = {}

    def start(self, worker, start, lanes=1, pause=(), pause_at="before_commit", repeat_for=0):
        """Starts the batch on `worker`, from tile number `start`."""
        self.runs += 1
        results = self.tmp / f"{worker.name}-{self.runs}.jsonl"
        args = ["/usr/bin/python3", BATCH, self.batch, results, "--start", start,
                "--lanes", lanes, "--pause", ",".join(pause), "--pause-at", pause_at,
                "--pause-dir", self.pause_dir, "--repeat-for", repeat_for]
        log = self.tmp / f"{worker.name}-{self.runs}.log"
        proc = worker.popen(args, env=self.env, log=log)
        proc.log = log
        proc.results = results
        proc.worker = worker
        return proc

    def start_all(self, **per_worker):
        """The batch on every worker host, each from another third of the tiles."""
        step = len(self.tiles) // len(self.net.workers)
        return [self.start(w, i * step, **per_worker.get(w.name, {}))
                for i, w in enumerate(self.net.workers)]

    def finish(self, procs, expect=0):
        """Waits for the batches; returns each one's attempts (dicts of hosts_batch.py)."""
        attempts = {}
        for proc in procs:
            proc.wait(timeout=900)
            lines = pathlib.Path(proc.results).read_text().splitlines() if os.path.exists(
                proc.results) else []
            attempts[proc.worker.name] = [json.loads(line) for line in lines]
            assert proc.returncode == expect, (
                f"the batch on {proc.worker.name} exited {proc.returncode}\n"
                + "\n".join(a["stderr"] for a in attempts[proc.worker.name] if a["exit"])[-6000:]
                + pathlib.Path(proc.log).read_text()[-2000:])
        return attempts

    def reached(self, tile):
        return (self.pause_dir / f"reached-{tile}").exists()

    def resume(self):
        (self.pause_dir / "resume").write_text("go")

    def ledger(self, sql, params=()):
        import psycopg
        with psycopg.connect(self.local_dsn, autocommit=True) as conn:
            cur = conn.execute(sql, params)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]

    def rows(self):
        return self.ledger("SELECT * FROM idem.ledger ORDER BY output_uri, claimed_at")

    def leases_over(self, host):
        """Whether every open claim of `host` has outlived its lease, on the ledger's clock."""
        return not self.ledger(
            "SELECT 1 FROM idem.ledger WHERE worker_host = %s AND completed_at IS NULL "
            "AND released_at IS NULL AND lease_expires_at > now()", (host.name,))

    def output(self, tile):
        return f"{self.prefix}/{tile}.tif"

    def objects(self):
        """The objects under the case's prefix, as the operator's host sees them."""
        with gdal_config(self.net.store.config()):
            return sorted(gdal.ReadDir(self.prefix + "/") or [])

    def plain(self, tile):
        """The tile as plain gdalwarp writes it, on local disk."""
        target = self.tmp / "plain" / f"{tile}.tif"
        if not target.exists():
            target.parent.mkdir(exist_ok=True)
            xmin, ymin, xmax, ymax = self.tiles[tile]
            run(["gdalwarp", "-q", "-of", "GTiff", *WARP, "-te", repr(xmin), repr(ymin),
                 repr(xmax), repr(ymax), self.source, target],
                check=True)
        return target

    def fault(self, name):
        """The fault `name` strikes now: the time to converge is counted from here."""
        self.report.update(fault=name, began=time.monotonic())

    def _same_as_plain(self, tile):
        ours, plain = gdal.Open(self.output(tile)), gdal.Open(str(self.plain(tile)))
        same = ours is not None and ours.GetGeoTransform() == plain.GetGeoTransform()
        ours = plain = None
        return same and (read_pixels(self.output(tile)) == read_pixels(self.plain(tile))).all()

    def assert_converged(self):
        """The checks of every test, after its fault (see the module's docstring); what they
        find is also recorded (IDEM_HOSTS_REPORT, for bench/faults_bench.py)."""
        self.report["seconds_to_converge"] = time.monotonic() - self.report["began"]
        rows = self.rows()
        completed = [r for r in rows if r["completed_at"] is not None]
        per_tile = {t: [r for r in completed if r["output_uri"] == self.output(t)]
                    for t in self.tiles}
        objects = set(self.objects())
        versions = self.net.store.versions(self.database + "/")
        with gdal_config(self.net.store.config()):
            wrong = [t for t in self.tiles if f"{t}.tif" in objects and not self._same_as_plain(t)]
        self.report.update(
            tiles=len(self.tiles),
            completed_twice=sum(len(r) > 1 for r in per_tile.values()),
            retried=sum(r[0]["attempt"] > 1 for r in per_tile.values() if r),
            # Azurite counts no versions ({key: ETag}): the cut test compares ETags instead.
            uploaded_twice=(sum(n > 1 for n in versions.values())
                            if self.net.store.store != "azure" else "n/a"),
            missing=sum(f"{t}.tif" not in objects or not per_tile[t] for t in self.tiles),
            orphans=len(objects - {f"{t}.tif" for t in self.tiles}),
            wrong=len(wrong))
        assert {t: len(r) for t, r in per_tile.items()} == {t: 1 for t in self.tiles}, \
            "a tile was not completed exactly once"
        assert not [r for r in rows if r["completed_at"] is None and r["released_at"] is None
                    and r["output_uri"] in {self.output(t) for t in self.tiles}], \
            "a claim is left open"
        # No object without its completed row, no completed row without its object.
        assert sorted(objects) == sorted(f"{t}.tif" for t in self.tiles)
        verify = run([GDAL_IDEM, "verify", "--dry-run", "--json", "-q"],
                     env=env_with(IDEM_LEDGER=self.local_dsn, **self.net.store.config()))
        report = json.loads(verify.stdout)
        assert verify.returncode == 0 and report["failed"] == 0, verify.stdout + verify.stderr
        assert report["checked"] == len(self.tiles)
        # Every object is plain gdalwarp's output: its pixels and its georeferencing.
        assert wrong == []
        # It converges: the whole batch again, on every host, changes nothing.
        before_rows = self.rows()
        self.finish(self.start_all())
        assert self.rows() == before_rows
        assert self.net.store.versions(self.database + "/") == versions
        self.report["converged"] = True
        return per_tile


def _report(made):
    path = os.environ.get("IDEM_HOSTS_REPORT")
    if path and "fault" in made.report:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({k: v for k, v in made.report.items() if k != "began"}) + "\n")


@pytest.fixture
def case(net, tmp_path):
    made = Case(net, tmp_path, through_pgbouncer=False)
    yield made
    _report(made)
    made.resume()  # a worker left paused by a failed test goes on, and ends
    for worker in net.workers:
        net.restore(worker)
        worker.clock_offset = None


def _case_on(net, tmp_path, use_store):
    """A case whose outputs go to the store `use_store()` makes the storage host's store."""
    use_store()
    try:
        made = Case(net, tmp_path, through_pgbouncer=False)
        yield made
        _report(made)
        made.resume()
        for worker in net.workers:
            net.restore(worker)
    finally:
        net.store.store = "s3"


@pytest.fixture
def gcs_case(net, tmp_path):
    """A case whose outputs go to the storage host's GCS store (/vsigs/)."""
    yield from _case_on(net, tmp_path, lambda: setattr(net.store, "store", "gcs"))


@pytest.fixture
def azure_case(net, tmp_path):
    """A case whose outputs go to the storage host's Azurite (/vsiaz/)."""
    yield from _case_on(net, tmp_path, net.store.use_azure)


@pytest.fixture
def bounced_case(net, tmp_path):
    made = Case(net, tmp_path, through_pgbouncer=True)
    yield made
    _report(made)
    made.resume()


def test_three_hosts_share_the_batch(case):
    """No fault: three hosts, one batch. Each tile is warped by one host, once."""
    case.fault("none")
    attempts = case.finish(case.start_all())
    per_tile = case.assert_converged()
    assert all(r[0]["attempt"] == 1 for r in per_tile.values())
    assert len({r[0]["worker_host"] for r in per_tile.values()}) >= 2, per_tile
    assert all(a["exit"] == 0 for tries in attempts.values() for a in tries)
    # Each object was uploaded once: one version of each key.
    assert set(case.net.store.versions(case.database + "/").values()) == {1}


def test_a_worker_cut_off_past_its_lease(case):
    """w1 has two claims, both stopped after checking their claim and looking at the object,
    right before the upload (before_commit); its link is cut; its leases run out; w2 and w3 take
    both over and finish the batch; the link comes back and w1 goes on. w1 must publish and
    complete nothing it lost: its uploads are refused (one version of each key: nothing of w1's
    landed) and so are its completions."""
    cut_off_past_the_lease(case)


@pytest.mark.whole_only
def test_a_worker_cut_off_past_its_lease_on_gcs(gcs_case):
    """The same against GCS (/vsigs/): w1's uploads carry the generation it saw
    (x-goog-if-generation-match: 0) and are refused; one write landed per key."""
    cut_off_past_the_lease(gcs_case)


@pytest.mark.whole_only
def test_a_worker_cut_off_past_its_lease_on_azure(azure_case):
    """The same against Azure (/vsiaz/, Azurite): w1's Put Blobs carry If-None-Match: * and are
    refused; no blob's ETag changed once w1 went on (an Azure write always changes it)."""
    cut_off_past_the_lease(azure_case)


def cut_off_past_the_lease(case):
    net, w1 = case.net, case.net.workers[0]
    first = sorted(case.tiles)[:2]
    batch1 = case.start(w1, 0, lanes=2, pause=first)
    wait_until(lambda: all(case.reached(t) for t in first) or batch1.poll() is not None,
                   "w1 to stop at before_commit on two tiles")
    assert batch1.poll() is None, case.finish([batch1])
    store = case.net.store.store
    on_store = {"gcs": " (/vsigs/)", "azure": " (/vsiaz/)"}.get(store, "")
    case.fault(f"a worker's link cut past its lease, with 2 claims{on_store}")
    net.cut(w1)
    wait_until(lambda: case.leases_over(w1), "w1's leases to run out", timeout=LEASE * 20)
    case.finish([case.start(w, 4 * i) for i, w in enumerate(net.workers[1:], 1)])
    taken = {r["output_uri"]: r for r in case.rows() if r["completed_at"] is not None}
    for tile in first:
        row = taken[case.output(tile)]
        assert row["worker_host"] in ("w2", "w3") and row["attempt"] == 2, row
    if store == "azure":  # {key: ETag}: nothing may change once w1 goes on
        etags = net.store.versions(case.database + "/")
        assert len(etags) == len(case.tiles), etags
    net.restore(w1)
    case.resume()
    attempts = case.finish([batch1])["w1"]
    for tile in first:
        tries = [a for a in attempts if a["tile"] == tile]
        assert tries[0]["exit"] != 0, tries  # w1's own attempt failed: it had lost the claim
    if store == "azure":
        assert net.store.versions(case.database + "/") == etags, \
            "the cut-off worker's upload landed"
    else:
        assert set(net.store.versions(case.database + "/").values()) == {1}, \
            "the cut-off worker's upload landed"
    per_tile = case.assert_converged()
    for tile in first:
        assert per_tile[tile][0]["worker_host"] != "w1"


def _fault_mid_batch(case, name, fault, pause_at="before_complete"):
    """The batch on every host, w1 stopped on its first tile at `pause_at` (its object uploaded,
    its completion not yet sent); `fault()` strikes while the others warp; then w1 goes on."""
    first = sorted(case.tiles)[0]
    procs = case.start_all(w1={"pause": [first], "pause_at": pause_at})
    wait_until(lambda: case.reached(first) or procs[0].poll() is not None,
                   f"w1 to stop at {pause_at}")
    assert procs[0].poll() is None, case.finish(procs)
    case.fault(name)
    fault()
    case.resume()
    attempts = case.finish(procs)
    # w1's tile was done and uploaded when the connection broke under it: its completion is
    # sent again on a new connection, so the tile is not done twice.
    assert [a["exit"] for a in attempts["w1"] if a["tile"] == first][0] == 0, attempts["w1"]
    per_tile = case.assert_converged()
    assert per_tile[first][0]["attempt"] == 1
    assert per_tile[first][0]["worker_host"] == "w1"
    return per_tile


@pytest.mark.whole_only
def test_postgresql_restarted_mid_batch(case):
    _fault_mid_batch(case, "PostgreSQL restarted", lambda: case.net.db.restart_postgres("fast"))


@pytest.mark.whole_only
def test_postgresql_crash_mid_batch(case):
    """An immediate stop: the server dies without a shutdown checkpoint and recovers from its
    WAL when it starts again."""
    _fault_mid_batch(case, "PostgreSQL crashed (immediate stop) and restarted",
                     lambda: case.net.db.restart_postgres("immediate"))


@pytest.mark.whole_only
def test_pgbouncer_restarted_mid_batch(bounced_case):
    _fault_mid_batch(bounced_case, "PgBouncer restarted", bounced_case.net.db.restart_pgbouncer)


@pytest.mark.whole_only
def test_twenty_percent_loss_on_a_worker_link_for_30_seconds(case):
    """w1 loses a fifth of its packets, both ways, for 30 s, running the batch (and then
    rerunning it) all that time."""
    net, w1 = case.net, case.net.workers[0]
    case.fault("20% packet loss on a worker's link for 30 s")
    net.lossy(w1, 20)
    try:
        procs = case.start_all(w1={"repeat_for": 30})
        case.finish(procs)
    finally:
        net.restore(w1)
    case.assert_converged()


@pytest.mark.whole_only
def test_a_worker_whose_clock_runs_two_hours_ahead(case):
    """w3's clock is 2 h ahead (libfaketime). Leases are on the ledger's clock, so its claims
    last as long as anyone's; its object-store requests are signed with its own time."""
    w3 = case.net.workers[2]
    w3.clock_offset = "+2h"
    proof = w3.run(["date", "+%s"], env=case.env)
    assert int(proof.stdout) > time.time() + 7000, "the clock of w3 is not ahead"
    case.fault("a worker's clock 2 h ahead")
    # w3 starts alone and stops on its first tile before the others start, so that tile is
    # w3's whatever the scheduling of the three batches.
    step = len(case.tiles) // len(case.net.workers)
    first = sorted(case.tiles)[2 * step]
    late = case.start(w3, 2 * step, pause=[first], pause_at="before_complete")
    wait_until(lambda: case.reached(first) or late.poll() is not None,
               "w3 to stop at before_complete")
    procs = [case.start(w, i * step) for i, w in enumerate(case.net.workers[:2])] + [late]
    case.resume()
    case.finish(procs)
    w3.clock_offset = None
    per_tile = case.assert_converged()
    assert any(r[0]["worker_host"] == "w3" for r in per_tile.values())
