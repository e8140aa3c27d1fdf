# SPDX-License-Identifier: MIT
"""The fault matrix (docs/concepts.md, "What happens when..."): a worker A doing work K1 is hit at
each pause point of the driver by SIGKILL, or by SIGSTOP past its lease then SIGCONT, while a
neighbour acts on the same output (a successor on K1, a successor on other work K2, or a
neighbour that fails busy), with an older completed output K0 at the path or none, on a local
path and on /vsis3/ (s3rver). After each case the invariants that users rely on are checked on
the files and the ledger; then one clean rerun of K1 must give plain gdalwarp's pixels.

Leases are ended in SQL (the case then plays out as if the time had passed); the stopped worker
goes on when its resume file appears and it is sent SIGCONT. Nothing waits on the clock. The
ledger is SQLite (the ledger-specific paths run against both backends in test_safety.py)."""

import hashlib
import itertools
import os
import signal
import sqlite3
import subprocess
import time

import numpy as np
import pytest
from osgeo import gdal

from idem_testlib import Ledger, env_with, make_source, read_pixels, run, temp_dirs_beside
from test_object_store import BUCKET, s3  # noqa: F401  (the module's s3rver fixture)

POINTS = ["during_write", "before_commit", "before_complete", "after_complete"]
FAULTS = ["kill", "stop"]
NEIGHBOURS = ["same key", "other key", "busy"]
RESAMPLING = {"K0": "near", "K1": "bilinear", "K2": "cubic"}
COUNTS = {"cases": 0, "invariants": 0}


def warp(src, dst, work):
    return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-ts", "48",
            "48", "-r", RESAMPLING[work], src, "/vsiidem/" + dst]


# Where a Case's output may be: a local directory, or one of these stores (its server given).
# "adls" is Azure named through /vsiadls/ (a Data Lake Storage Gen2 filesystem), Azure's ETags
# then recorded as on /vsiaz/.
OBJECT_STORES = ("s3", "gcs", "azure", "adls")
AZURE = ("azure", "adls")


class Case:
    def __init__(self, tmp_path, storage, s3server, source):
        self.tmp = tmp_path
        self.source = source
        db = tmp_path / "ledger.sqlite"
        self.ledger = Ledger("sqlite", "sqlite:" + str(db), lambda: sqlite3.connect(str(db)))
        extra = dict(IDEM_LEDGER=self.ledger.dsn, IDEM_FSYNC="NO")
        if storage in OBJECT_STORES:  # `s3server` is then the store's server
            (tmp_path / "cpl_tmpdir").mkdir()
            extra.update(CPL_TMPDIR=str(tmp_path / "cpl_tmpdir"), **s3server.config())
            scheme = {"s3": "vsis3", "gcs": "vsigs", "azure": "vsiaz", "adls": "vsiadls"}[storage]
            self.dst = f"/{scheme}/{BUCKET}/matrix/{tmp_path.name}/out.tif"
            self.temp_root = tmp_path / "cpl_tmpdir" / "x"
        else:
            (tmp_path / "out").mkdir()
            self.dst = str(tmp_path / "out" / "out.tif")
            self.temp_root = tmp_path / "out" / "out.tif"
        self.env = env_with(**extra)
        self.storage = storage

    def checked(self, condition, what):
        COUNTS["invariants"] += 1
        assert condition, what

    def end_leases(self):
        self.ledger.end_leases()

    def wait_for_lease_end(self, pid):
        """Polls until the claim of the stopped worker `pid` has expired on the ledger's clock,
        as its own clock then says too (a stopped process's monotonic clock runs on)."""
        live = ("SELECT count(*) FROM ledger WHERE completed_at IS NULL AND worker_pid = ? AND "
                "lease_expires_at > (julianday('now') - 2440587.5) * 86400.0")
        for _ in range(1200):
            conn = self.ledger.connect()
            try:
                if conn.execute(live, (pid,)).fetchone()[0] == 0:
                    return
            finally:
                conn.close()
            time.sleep(0.05)  # polling interval
        raise AssertionError("the stopped worker's lease never ended")

    def rows(self, work=None):
        rows = self.ledger.rows()
        if work is None:
            return rows
        name = {"near": "NearestNeighbour", "bilinear": "Bilinear", "cubic": "Cubic"}
        # A warp's work is told by its resampling; other commands name theirs in metadata
        # (-mo IDEM_TEST_WORK=K1).
        return [r for r in rows if f'"{name[RESAMPLING[work]]}"' in r["work_json"]
                or ('"IDEM_TEST_WORK"' in r["work_json"]
                    and f'"text":"{work}"' in r["work_json"])]

    def output(self):
        """(size, mtime_ns, md5) of the primary output, or None; on Azure, whose ETags are no
        digest, (size, ETag, md5)."""
        if self.storage in OBJECT_STORES:
            gdal.VSICurlClearCache()
            f = gdal.VSIFOpenL(self.dst, "rb")
            if f is None:
                return None
            data = b""
            while True:
                chunk = gdal.VSIFReadL(1, 1 << 20, f)
                if not chunk:
                    break
                data += chunk
            gdal.VSIFCloseL(f)
            etag = None
            if self.storage in AZURE:
                etag = (gdal.GetFileMetadata(self.dst, "HEADERS") or {}).get("etag")
            return (len(data), etag, hashlib.md5(data).hexdigest())
        if not os.path.exists(self.dst):
            return None
        st = os.stat(self.dst)
        with open(self.dst, "rb") as f:
            return (st.st_size, st.st_mtime_ns, hashlib.md5(f.read()).hexdigest())

    def records(self, row, output):
        """Whether a completed row's fingerprint is that of the file `output`."""
        if row["completed_at"] is None or output is None or row["output_size"] != output[0]:
            return False
        if self.storage in AZURE:
            return row["output_etag"] == output[1]
        if self.storage in ("s3", "gcs"):
            return row["output_etag"] in (f"md5:{output[2]}", f'"{output[2]}"')
        return row["output_mtime_ns"] == output[1]

    def temp_dirs(self):
        return temp_dirs_beside(self.temp_root)


@pytest.fixture(scope="module")
def matrix_source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("matrix") / "scene.tif", size=96)


@pytest.fixture(scope="module")
def direct_k1(matrix_source, tmp_path_factory):
    out = tmp_path_factory.mktemp("direct") / "k1.tif"
    run(["gdalwarp", "-q", "-of", "GTiff", "-t_srs", "EPSG:3857", "-ts", "48", "48", "-r",
         "bilinear", matrix_source, out], check=True)
    return read_pixels(out)


def start_worker(case, point):
    resume = case.tmp / f"resume-{point}"
    env = dict(case.env, IDEM_TEST_PAUSE_AT=point, IDEM_TEST_PAUSE_SECONDS="600",
               IDEM_TEST_RESUME_FILE=str(resume), IDEM_STALE_SECONDS="2")
    proc = subprocess.Popen(warp(case.source, case.dst, "K1"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if f"test pause at {point}" in line:
            return proc, resume
    proc.wait()
    raise AssertionError(f"worker A never reached {point} (exit {proc.returncode})")


def play(case, point, fault, neighbour, older, direct):
    COUNTS["cases"] += 1
    if older:
        run(warp(case.source, case.dst, "K0"), env=case.env, check=True)
    k0_before = case.rows("K0")
    a, resume = start_worker(case, point)
    a.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    if fault == "kill":
        a.wait()
    try:
        if neighbour == "busy":
            proc = run(warp(case.source, case.dst, "K1"), env=dict(case.env, IDEM_ON_BUSY="FAIL"))
            busy = point != "after_complete"
            case.checked((proc.returncode != 0) == busy, f"busy neighbour exit {proc.returncode}")
        else:
            if fault == "kill":
                case.end_leases()  # A is dead: as if its lease had run out
            else:
                case.wait_for_lease_end(a.pid)  # A stays stopped past its lease
            work = "K1" if neighbour == "same key" else "K2"
            run(warp(case.source, case.dst, work), env=case.env, check=True)
    finally:
        resume.write_text("go")
        if fault == "stop":
            a.send_signal(signal.SIGCONT)
            a.communicate(timeout=300)
    output = case.output()
    rows = case.rows()
    # Nothing another worker completed is gone: the older row, the neighbour's row.
    case.checked(len(case.rows("K0")) == len(k0_before), "the older work's row was removed")
    if neighbour != "busy":
        work = "K1" if neighbour == "same key" else "K2"
        case.checked(any(r["completed_at"] is not None for r in case.rows(work)),
                     f"the neighbour's completed row of {work} is gone")
    # The file at the path is one a completed row records, but in the one window the design
    # leaves open: A killed between publishing and completing, with no successor since.
    window = fault == "kill" and point == "before_complete" and neighbour == "busy"
    if output is not None and not window:
        case.checked(any(case.records(r, output) for r in rows),
                     "the output at the path is recorded by no completed row")
    # Every current (not superseded) completion records the file at the path: a skip of it would
    # serve what it describes. In the window, the older work's row describes the file A's publish
    # replaced (its skip then finds the file changed and rebuilds).
    current = [r for r in rows if r["completed_at"] is not None and r["superseded_at"] is None]
    for row in current:
        if window and row in k0_before:
            continue
        case.checked(case.records(row, output),
                     f"a current completion ({row['work_key'][:12]}) does not record the file "
                     "at the path")
    # One clean rerun of K1 (after A's lease, if any is left): plain gdalwarp's pixels.
    case.end_leases()
    run(warp(case.source, case.dst, "K1"), env=case.env, check=True)
    output = case.output()
    k1 = [r for r in case.rows("K1") if r["completed_at"] is not None]
    case.checked(len(k1) == 1 and case.records(k1[0], output), "K1 not recorded after rerun")
    pixels = read_pixels(case.dst)
    case.checked(np.array_equal(pixels, direct), "K1's pixels differ from plain gdalwarp's")
    case.checked(case.temp_dirs() == [], f"temporary directories left: {case.temp_dirs()}")


def combinations(storage):
    points = POINTS + (["during_upload"] if storage == "s3" else [])
    return list(itertools.product(points, FAULTS, NEIGHBOURS, [True, False]))


# A minute or two: Debian 12's make test runs it; the test matrix's share (IDEM_TEST_SHARE=smoke)
# kills workers at the same points through test_idem_failures.py and test_invariants.py.
@pytest.mark.whole_only
@pytest.mark.parametrize("storage", ["local", "s3"])
def test_fault_matrix(storage, s3, matrix_source, direct_k1, tmp_path):  # noqa: F811
    cases = combinations(storage)
    before = dict(COUNTS)
    for n, (point, fault, neighbour, older) in enumerate(cases):
        case_dir = tmp_path / f"case{n}"
        case_dir.mkdir()
        case = Case(case_dir, storage, s3, matrix_source)
        try:
            play(case, point, fault, neighbour, older, direct_k1)
        except AssertionError as error:
            raise AssertionError(f"{storage}, {point}, {fault}, neighbour {neighbour}, "
                                 f"older output {'present' if older else 'absent'}: {error}")
    print(f"fault matrix, {storage}: {COUNTS['cases'] - before['cases']} cases, "
          f"{COUNTS['invariants'] - before['invariants']} invariants checked")
