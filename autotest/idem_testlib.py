# SPDX-License-Identifier: MIT
"""Shared helpers for the driver, CLI and /vsiidem/ tests: paths of the built plugin and
command, synthetic sources, running the real programs, and reading ledger rows from SQLite or
PostgreSQL. Fixtures defined here are imported by the test modules that use them."""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
import uuid

import numpy as np
import pytest
from osgeo import gdal, osr

gdal.UseExceptions()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.environ.get("IDEM_BUILD_DIR", os.path.join(ROOT, "build"))
# IDEM_TEST_INSTALLED=1: the installed package (`make deb`), found where GDAL finds plugins and on
# PATH, instead of the build; GDAL_DRIVER_PATH is then left unset.
INSTALLED = os.environ.get("IDEM_TEST_INSTALLED") == "1"
# How long Prefect's ephemeral API server may take to answer its first request (Prefect's own
# default is 20 s, which a slow or loaded machine exceeds: the flow then fails before any task).
# Prefect polls until the server answers, so a faster start is not slowed by this cap.
PREFECT_STARTUP_SECONDS = 300
PLUGIN_DIR = None if INSTALLED else os.path.join(BUILD_DIR, "gdalplugins")
GDAL_IDEM = (shutil.which("gdal-idem") or "gdal-idem") if INSTALLED else os.path.join(
    BUILD_DIR, "src", "gdal-idem")


def gdal_at_least(version):
    """Whether the GDAL these tests run on is at least `version` ("3.10"): the one spelling of
    the version conditions of the tests."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return int(gdal.VersionInfo("VERSION_NUM")) >= major * 1000000 + minor * 10000


def share_keeps(values, kept):
    """Parameters of a family of tests for pytest.mark.parametrize: every one of `values` runs in
    the whole suite (Debian 12), and only those in `kept` in the test matrix's share
    (IDEM_TEST_SHARE=smoke, conftest.py); the others are marked whole_only. `kept` names the
    members whose path the others share, so that the share still covers it."""
    missing = [value for value in kept if value not in values]
    assert not missing, f"share_keeps: {missing} are not among the values"
    return [value if value in kept else pytest.param(value, marks=pytest.mark.whole_only)
            for value in values]


def set_driver_path(env):
    """Points `env` at the plugin under test: the build's, or (installed) GDAL's own path."""
    if PLUGIN_DIR is None:
        env.pop("GDAL_DRIVER_PATH", None)
    else:
        env["GDAL_DRIVER_PATH"] = PLUGIN_DIR
    return env


def make_source(path, size=512, bands=3, epsg=32633, origin=(500000.0, 4650000.0), pixel=10.0,
                dtype=gdal.GDT_Byte, nodata=None, seed=1):
    """A realistic synthetic source: gradients plus noise, projected CRS."""
    driver = gdal.GetDriverByName("GTiff")
    ds = driver.Create(str(path), size, size, bands, dtype, ["TILED=YES"])
    ds.SetGeoTransform([origin[0], pixel, 0, origin[1], 0, -pixel])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(epsg)
    ds.SetProjection(srs.ExportToWkt())
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    for b in range(bands):
        data = (xx * (b + 1) + yy * 2) % 251 + rng.integers(0, 5, (size, size))
        band = ds.GetRasterBand(b + 1)
        band.WriteArray(data.astype(np.uint8 if dtype == gdal.GDT_Byte else np.float32))
        if nodata is not None:
            band.SetNoDataValue(nodata)
    ds = None
    return str(path)


def env_with(**extra):
    env = dict(os.environ)
    set_driver_path(env)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def warp_cmd(src, dst, *extra, resampling="bilinear", srs="EPSG:3857", quiet=False,
             through_vsiidem=False):
    """The tests' usual warp: gdalwarp -overwrite through IDEM into `srs`, `extra` options before
    the source; `dst` as given, or under /vsiidem/ with through_vsiidem."""
    return ["gdalwarp", *(["-q"] if quiet else []), "-overwrite", "-of", "IDEM", "-t_srs", srs,
            "-r", resampling, *extra, src, ("/vsiidem/" + str(dst)) if through_vsiidem else dst]


def run(args, env=None, cwd=None, timeout=300, check=False):
    proc = subprocess.run([str(a) for a in args], env=env or env_with(), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


# A gdalwarp command run as gdal.Warp in a Python process (GDALWarp(), the code gdalwarp runs),
# which then prints the IDEM driver's RESULT and _DEBUG_ metadata: what the call did
# (docs/configuration.md, "The result of a call", "Debug metadata"), as one JSON line. The
# command's last two words are its source and destination.
GDAL_WARP_REPORTING = r"""
import json, sys
from osgeo import gdal
gdal.UseExceptions()
*args, src, dst = sys.argv[1:]
# What the program itself handles: -overwrite, and -oo (it opens the source with them).
options, open_options = [], []
while args:
    word = args.pop(0)
    if word == "-oo":
        open_options.append(args.pop(0))
    elif word != "-overwrite":
        options.append(word)
try:
    gdal.Warp(dst, gdal.OpenEx(src, gdal.OF_RASTER, open_options=open_options), options=options)
finally:
    idem = gdal.GetDriverByName("IDEM")
    print(json.dumps({domain: idem.GetMetadata(domain) or {} for domain in ("RESULT", "_DEBUG_")}))
"""


def as_gdal_warp(cmd):
    """`cmd`, a gdalwarp command (["gdalwarp", ...]), as a Python process that runs it as
    gdal.Warp and prints the driver's reports (read them with reports_of())."""
    assert cmd[0] == "gdalwarp", cmd
    return ["/usr/bin/python3", "-c", GDAL_WARP_REPORTING, *cmd[1:]]


def reports_of(stdout, domain):
    """The report of `domain` ("RESULT" or "_DEBUG_") an as_gdal_warp() process printed."""
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1])[domain] if lines else {}


def warp_reporting(cmd, env=None, check=True):
    """Runs `cmd`, a gdalwarp command (["gdalwarp", ...]), as gdal.Warp; returns the process and
    the IDEM driver's _DEBUG_ report of the call as a dict."""
    proc = run(as_gdal_warp(cmd), env=env, check=check)
    return proc, reports_of(proc.stdout, "_DEBUG_")


def warp_result(cmd, env=None, check=True):
    """The same with the driver's RESULT report (docs/configuration.md, "The result of a
    call")."""
    proc = run(as_gdal_warp(cmd), env=env, check=check)
    return proc, reports_of(proc.stdout, "RESULT")


def wait_until(condition, what, timeout=120):
    """Polls `condition` until it holds; fails naming `what` after `timeout` seconds (a bound on
    a hang, not a measure of anything)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)  # polling interval


def start_paused(cmd, env, point, seconds=600, resume_file=None):
    """Starts a worker process that pauses at `point` (for `seconds`, or until `resume_file`
    exists) and returns it once it is there: the pause creates a file (IDEM_TEST_REACHED_FILE)."""
    reached = os.path.join(tempfile.gettempdir(), f"idem-reached-{uuid.uuid4().hex}")
    env = dict(env, IDEM_TEST_PAUSE_AT=point, IDEM_TEST_PAUSE_SECONDS=str(seconds),
               IDEM_TEST_REACHED_FILE=reached)
    if resume_file is not None:
        env["IDEM_TEST_RESUME_FILE"] = str(resume_file)
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: os.path.exists(reached) or proc.poll() is not None,
                   f"the worker to reach {point}")
        if not os.path.exists(reached):
            _, err = proc.communicate()
            raise AssertionError(f"worker never reached {point}: rc={proc.returncode}\n{err}")
    finally:
        if os.path.exists(reached):
            os.unlink(reached)
    return proc


def kill9(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


class PausedWorker:
    """A worker process stopped at a pause point until resume() creates its resume file."""

    def __init__(self, cmd, env, point, tmp_path):
        self.resume_file = tmp_path / f"resume-{point}-{os.urandom(4).hex()}"
        self.proc = start_paused(cmd, env, point, resume_file=self.resume_file)
        self.stdout = None

    def resume(self):
        """Lets the worker go on; its exit code and stderr (its stdout is kept in .stdout)."""
        self.resume_file.write_text("go")
        self.stdout, err = self.proc.communicate(timeout=300)
        return self.proc.returncode, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until_leases_expired(ledger, bound_seconds=60):
    """Polls the ledger until no in-flight lease is live on its own clock (a worker stopped
    past its lease: its own clock then says so too)."""
    wait_until_leases_expired_for(ledger, None, bound_seconds)


def wait_until_leases_expired_for(ledger, pid, bound_seconds=60):
    """The same for the claims of one worker process (every worker's when `pid` is None)."""
    which = "" if pid is None else f" AND worker_pid = {int(pid)}"
    if ledger.backend == "sqlite":
        live = ("SELECT count(*) FROM ledger WHERE completed_at IS NULL AND lease_expires_at > "
                "(julianday('now') - 2440587.5) * 86400.0" + which)
    else:
        live = ("SELECT count(*) FROM idem.ledger WHERE completed_at IS NULL "
                "AND lease_expires_at > now()" + which)
    polls = int(bound_seconds / 0.05)
    for _ in range(polls):
        conn = ledger.connect()
        try:
            if conn.execute(live).fetchone()[0] == 0:
                return
        finally:
            conn.close()
        time.sleep(0.05)  # polling interval, not a wait for the event itself
    raise AssertionError("a lease never expired")


@contextlib.contextmanager
def gdal_config(options):
    """This process's GDAL with the config `options` set (an object store's endpoint and keys),
    its /vsicurl/ cache cleared on the way in and out, the previous values put back."""
    previous = {k: gdal.GetConfigOption(k) for k in options}
    for key, value in options.items():
        gdal.SetConfigOption(key, value)
    gdal.VSICurlClearCache()
    try:
        yield
    finally:
        for key, value in previous.items():
            gdal.SetConfigOption(key, value)
        gdal.VSICurlClearCache()



def lonlat_corners(path):
    """The four corners of a raster in longitude/latitude (EPSG:4326, longitude first)."""
    dataset = gdal.Open(str(path))
    gt = dataset.GetGeoTransform()
    lonlat = osr.SpatialReference()
    lonlat.ImportFromEPSG(4326)
    lonlat.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    to_lonlat = osr.CoordinateTransformation(dataset.GetSpatialRef(), lonlat)
    return [to_lonlat.TransformPoint(gt[0] + gt[1] * px, gt[3] + gt[5] * py)[:2]
            for px in (0, dataset.RasterXSize) for py in (0, dataset.RasterYSize)]

def read_pixels(path):
    ds = gdal.Open(str(path))
    return np.stack([ds.GetRasterBand(i + 1).ReadAsArray() for i in range(ds.RasterCount)])


def assert_same_pixels(a, b):
    pa, pb = read_pixels(a), read_pixels(b)
    assert pa.shape == pb.shape
    differing = int(np.count_nonzero(pa != pb))
    assert differing == 0, f"{differing} pixels differ between {a} and {b}"


def assert_translation_rebuilt_after(change, source, out, ledger, env, cwd):
    """gdal_translate of `source` (run from `cwd`) through IDEM into `out` and directly, before and
    after `change()`, which must change the direct call's pixels: the IDEM call after it is other
    work, rebuilt (a second completed row) with the direct call's pixels, not a skip."""
    def translate():
        run(["gdal_translate", "-q", "-of", "IDEM", str(source), "/vsiidem/" + str(out)],
            env=env, cwd=cwd, check=True)
        run(["gdal_translate", "-q", str(source), "direct.tif"], cwd=cwd, check=True)
        return read_pixels(os.path.join(cwd, "direct.tif"))

    first = translate()
    assert np.array_equal(read_pixels(out), first)
    change()
    second = translate()
    assert np.count_nonzero(second != first) > 100
    assert len(ledger.completed()) == 2
    assert np.array_equal(read_pixels(out), second)


def temp_dirs_beside(path):
    directory = os.path.dirname(str(path))
    return [n for n in os.listdir(directory) if n.startswith(".idem-tmp-")]


def file_state(path):
    st = os.stat(path)
    with open(path, "rb") as f:
        data = f.read()
    return (st.st_ino, st.st_mtime_ns, st.st_size, data)


class Ledger:
    """A ledger DSN plus a way to read its rows, for SQLite or PostgreSQL."""

    def __init__(self, backend, dsn, connect):
        self.backend = backend
        self.dsn = dsn
        self._connect = connect

    def connect(self):
        """A connection to the ledger's database itself (never through a pooler)."""
        return self._connect()

    def rows(self, where="TRUE", params=()):
        table = "ledger" if self.backend == "sqlite" else "idem.ledger"
        if self.backend == "sqlite":
            where = where.replace("%s", "?")
            if not os.path.exists(self.dsn[len("sqlite:"):]):
                return []
        sql = f"SELECT * FROM {table} WHERE {where} ORDER BY claimed_at"
        conn = self._connect()
        try:
            cur = conn.cursor()
            try:
                cur.execute(sql, params)
            except Exception as exc:  # no schema yet: no rows
                if "no such table" in str(exc) or "does not exist" in str(exc):
                    return []
                raise
            names = [d[0] for d in cur.description]
            return [dict(zip(names, r)) for r in cur.fetchall()]
        finally:
            conn.close()

    def count(self, table, where="TRUE", params=()):
        """Rows of one of the ledger's tables (named without the schema) matching `where`."""
        if self.backend == "sqlite":
            where = where.replace("%s", "?")
        else:
            table = "idem." + table
        conn = self._connect()
        try:
            cur = conn.cursor()
            cur.execute(f"SELECT count(*) FROM {table} WHERE {where}", params)
            return cur.fetchone()[0]
        finally:
            conn.close()

    def completed(self):
        return [r for r in self.rows() if r["completed_at"] is not None]

    def end_leases(self, where="TRUE"):
        """Ends the lease of every open claim (those `where` selects) now, on the ledger's own
        clock: what a test of a killed worker would otherwise sleep for until its lease lapsed."""
        table = "ledger" if self.backend == "sqlite" else "idem.ledger"
        conn = self._connect()
        try:
            conn.cursor().execute(
                f"UPDATE {table} SET lease_expires_at = claimed_at WHERE completed_at IS NULL "
                f"AND released_at IS NULL AND ({where})")
            conn.commit()
        finally:
            conn.close()


def _pg_dsn():
    dsn = os.environ.get("IDEM_TEST_PG_DSN")
    if not dsn:
        if os.environ.get("IDEM_TEST_REQUIRE_PG") == "1":
            pytest.fail("IDEM_TEST_PG_DSN is not set but IDEM_TEST_REQUIRE_PG=1")
        pytest.skip("no PostgreSQL (run under scripts/with-postgres)")
    return dsn


_created_databases = []


def pg_fresh_database():
    """A new empty database (with PostGIS) in the test cluster; returns its DSN. It is dropped
    when the session ends (drop_test_databases)."""
    import psycopg
    base = _pg_dsn()
    name = "idem_t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    _created_databases.append(name)
    dsn = base.replace("dbname=" + base.split("dbname=")[1].split()[0], "dbname=" + name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    return dsn


def drop_test_databases():
    """Drops the databases pg_fresh_database made (connections left open are ended: FORCE);
    returns how many."""
    if not _created_databases:
        return 0
    import psycopg
    with psycopg.connect(_pg_dsn(), autocommit=True) as conn:
        for name in _created_databases:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    dropped = len(_created_databases)
    _created_databases.clear()
    return dropped


def idem_driver_missing():
    """Why GDAL's programs would not find the IDEM driver under test, or None when they do."""
    code = ("from osgeo import gdal\n"
            "gdal.AllRegister()\n"
            "print('IDEM' if gdal.GetDriverByName('IDEM') else 'missing')\n")
    proc = subprocess.run(["/usr/bin/python3", "-c", code], env=env_with(), capture_output=True,
                          text=True, timeout=120)
    if proc.returncode == 0 and proc.stdout.strip() == "IDEM":
        return None
    where = f"GDAL_DRIVER_PATH={PLUGIN_DIR}" if PLUGIN_DIR else "GDAL's plugin directory"
    return (f"GDAL does not load the IDEM driver from {where} (build it, or install the "
            f"package): {proc.stdout.strip()} {proc.stderr.strip()}")


_bouncer = None


def shared_pgbouncer():
    """One PgBouncer (session pooling, docs/operations.md) in front of the test cluster, started
    on first use and stopped when the tests end."""
    global _bouncer
    if _bouncer is None:
        import atexit
        from pgbouncer import PgBouncer
        _bouncer = PgBouncer(_pg_dsn(), pool_size=4).start()
        atexit.register(_bouncer.stop)
    return _bouncer


def make_ledger(backend, tmp_path):
    """"sqlite", "postgresql", or "pgbouncer": a PostgreSQL ledger whose DSN goes through
    PgBouncer in session mode, so worker processes share (and reuse) four server backends."""
    if backend == "sqlite":
        path = os.path.join(str(tmp_path), "ledger.sqlite")
        return Ledger("sqlite", "sqlite:" + path, lambda: sqlite3.connect(path))
    import psycopg
    dsn = pg_fresh_database()
    if backend == "pgbouncer":
        return Ledger("postgresql", shared_pgbouncer().dsn_for(dsn), lambda: psycopg.connect(dsn))
    return Ledger("postgresql", dsn, lambda: psycopg.connect(dsn))


# Every ledger kind. The test matrix's share (IDEM_TEST_SHARE=smoke) leaves out PgBouncer here
# (a minute in all); test_pgbouncer_harness.py, test_claim_durability.py and test_idem_driver.py
# run it there.
@pytest.fixture(params=share_keeps(["sqlite", "postgresql", "pgbouncer"],
                                    kept=["sqlite", "postgresql"]))
def ledger(request, tmp_path):
    return make_ledger(request.param, tmp_path)


@pytest.fixture
def sqlite_ledger(tmp_path):
    return make_ledger("sqlite", tmp_path)
