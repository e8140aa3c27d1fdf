# SPDX-License-Identifier: MIT
"""The IDEM driver under crashes, races and bad input: kill -9 at each step, many workers on one
destination or on many tiles, busy handling, a lost lease, and clear errors that lose nothing."""

import functools
import os
import subprocess

import pytest
from osgeo import gdal

from idem_testlib import (PLUGIN_DIR, PausedWorker, env_with, kill9, file_state, ledger,  # noqa: F401
                          make_source, read_pixels, run, sqlite_ledger, temp_dirs_beside,
                          wait_until_leases_expired, warp_reporting, warp_result, as_gdal_warp,
                          reports_of)
from idem_testlib import warp_cmd as shared_warp_cmd


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=768)


warp_cmd = functools.partial(shared_warp_cmd, through_vsiidem=True)


def in_flight(rows):
    return [r for r in rows if r["completed_at"] is None]


@pytest.mark.parametrize("point", ["during_write", "before_commit", "before_complete"])
def test_idem_kill9_never_leaves_partial_output_and_rerun_completes(ledger, source, tmp_path,
                                                                    point):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_STALE_SECONDS=3)
    worker = PausedWorker(warp_cmd(source, out), env, point, tmp_path).proc
    kill9(worker)
    if point == "before_complete":
        # Renamed into place: the file is whole; the ledger must not say completed.
        assert gdal.Open(str(out)) is not None
    else:
        assert not out.exists()
    rows = ledger.rows()
    assert len(rows) == 1 and rows[0]["completed_at"] is None
    # The dead worker's lease ends (in SQL, as its running out would) and a rerun takes over and
    # completes.
    ledger.end_leases()
    proc = run(warp_cmd(source, out), env=env, check=True)
    assert "skipped" not in proc.stderr
    rows = ledger.rows()
    assert len(rows) == 1
    assert rows[0]["completed_at"] is not None and rows[0]["attempt"] == 2
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert (read_pixels(out) == read_pixels(direct)).all()


def test_idem_kill9_after_complete_rerun_skips(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    kill9(PausedWorker(warp_cmd(source, out), env, "after_complete", tmp_path).proc)
    before = file_state(out)
    proc = run(warp_cmd(source, out), env=env, check=True)
    assert "IDEM: skipped" in proc.stderr
    assert file_state(out) == before


def test_idem_busy_fail_names_the_holder(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    holder = PausedWorker(warp_cmd(source, out), env, "during_write", tmp_path).proc
    try:
        proc = run(warp_cmd(source, out), env=dict(env, IDEM_ON_BUSY="FAIL"))
        assert proc.returncode != 0
        assert f"pid {holder.pid}" in proc.stderr
        assert "IDEM_ON_BUSY=FAIL" in proc.stderr
        # A program reads why from the driver's RESULT (docs/configuration.md).
        _, result = warp_result(warp_cmd(source, out), env=dict(env, IDEM_ON_BUSY="FAIL"),
                                check=False)
        assert (result["OUTCOME"], result["ERROR_KIND"]) == ("FAILED", "BUSY"), result
        assert f"pid {holder.pid}" in result["ERROR"]
        assert result["KEY"] == ledger.rows()[0]["work_key"]
    finally:
        kill9(holder)
    assert not out.exists()


def test_idem_busy_wait_returns_the_other_workers_output(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    holder = PausedWorker(warp_cmd(source, out), env, "during_write", tmp_path)
    waiter = subprocess.Popen([str(c) for c in warp_cmd(source, out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in waiter.stderr:  # the waiter says it waits for the holder: resume the holder
            seen.append(line)
            if "waiting for" in line:
                break
        code, _ = holder.resume()
        assert code == 0
        _, rest = waiter.communicate(timeout=300)
    finally:
        holder.kill()
        waiter.kill()
    stderr = "".join(seen) + rest
    assert waiter.returncode == 0, stderr
    assert "waiting for" in stderr
    assert "completed by another worker while this one waited" in stderr
    rows = sqlite_ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 1 and rows[0]["completed_at"] is not None


def test_idem_lost_lease_aborts_without_publishing(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_STALE_SECONDS=2)
    zombie = PausedWorker(as_gdal_warp(warp_cmd(source, out)), env, "during_write", tmp_path)
    try:
        # The zombie's lease runs out, on the ledger's clock and on its own (which decides how
        # long it trusts its lease without renewing it): no SQL shortcut here.
        wait_until_leases_expired(sqlite_ledger)
        run(warp_cmd(source, out), env=env, check=True)
        taken_over = file_state(out)
        code, stderr = zombie.resume()
    finally:
        zombie.kill()
    assert code != 0
    assert "lost" in stderr
    result = reports_of(zombie.stdout, "RESULT")
    assert (result["OUTCOME"], result["ERROR_KIND"]) == ("FAILED", "LOST_CLAIM"), result
    assert file_state(out) == taken_over
    rows = sqlite_ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 2 and rows[0]["completed_at"] is not None
    assert rows[0]["worker_pid"] != zombie.proc.pid
    assert temp_dirs_beside(out) == []


def lease_length(row):
    """Seconds from the claim to the lease's end: the lease itself, unless it was renewed."""
    end, start = row["lease_expires_at"], row["claimed_at"]
    return end - start if isinstance(end, float) else (end - start).total_seconds()


def test_idem_tile_runs_without_a_renewal_thread_and_long_work_renews(ledger, source,
                                                                      tmp_path):
    """A quick piece of work never starts the lease keeper's thread (a second thread costs a tile
    about 1 ms) and is not renewed; work that runs past a second starts it at its next progress
    report, and it renews at once when a renewal is due (a 3 s lease: one a second)."""
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_STALE_SECONDS=3)
    quick = tmp_path / "quick.tif"
    _, report = warp_reporting(warp_cmd(source, quick, "-ts", "256", "256"), env=env)
    assert report["LEASE_RENEWAL_THREAD"] == "NOT_STARTED"
    row = ledger.rows("output_uri = %s", (str(quick),))[0]
    assert row["completed_at"] is not None
    assert lease_length(row) == pytest.approx(3, abs=0.01)

    slow = tmp_path / "slow.tif"
    _, report = warp_reporting(warp_cmd(source, slow, "-ts", "256", "256"),
                               env=dict(env, IDEM_TEST_PAUSE_AT="during_write",
                                        IDEM_TEST_PAUSE_SECONDS="1.5"))
    assert report["LEASE_RENEWAL_THREAD"] == "STARTED"
    row = ledger.rows("output_uri = %s", (str(slow),))[0]
    assert row["completed_at"] is not None and row["attempt"] == 1
    assert lease_length(row) > 4  # renewed about 1.5 s after the claim, to now + 3 s
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", "-ts", "256", "256",
         source, direct], check=True)
    assert (read_pixels(slow) == read_pixels(direct)).all()


def test_idem_eight_processes_one_destination_one_attempt(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    procs = [subprocess.Popen([str(c) for c in warp_cmd(source, out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in results), results
    rows = ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 1 and rows[0]["completed_at"] is not None
    assert sum("skipped" in err for _, err in results) == 7
    assert gdal.Open(str(out)).RasterCount == 3


TILE_WORKER = r"""
import random, sys
from osgeo import gdal
gdal.UseExceptions()
src, outdir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
tiles = [(x, y) for x in range(8) for y in range(8)]
random.Random(seed).shuffle(tiles)
for x, y in tiles:
    minx, maxy = 500000 + x * 960, 4650000 - y * 960
    ds = gdal.Warp(f"/vsiidem/{outdir}/t_{x}_{y}.tif", src, format="IDEM",
                   outputBounds=(minx, maxy - 960, minx + 960, maxy), width=64, height=64,
                   resampleAlg="bilinear")
    assert ds is not None
    ds = None
"""


def test_idem_eight_processes_sixty_four_tiles_each_done_once(ledger, source, tmp_path):
    outdir = tmp_path / "tiles"
    outdir.mkdir()
    env = env_with(IDEM_LEDGER=ledger.dsn)
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", TILE_WORKER, source, str(outdir),
                               str(seed)], env=env, stderr=subprocess.PIPE, text=True)
             for seed in range(8)]
    for p in procs:
        assert p.wait(timeout=600) == 0, p.stderr.read()
    rows = ledger.rows()
    assert len(rows) == 64
    assert all(r["attempt"] == 1 and r["completed_at"] is not None for r in rows)
    assert len(os.listdir(outdir)) == 64


def test_idem_unknown_format_is_refused(sqlite_ledger, source, tmp_path):
    out = tmp_path / "o.tif"
    proc = run(warp_cmd(source, out, "-co", "FORMAT=NOPE"),
               env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert "FORMAT=NOPE" in proc.stderr
    assert not out.exists()
    assert sqlite_ledger.rows() == []


def test_idem_missing_destination_directory_is_refused(sqlite_ledger, source, tmp_path):
    out = tmp_path / "missing" / "o.tif"
    proc = run(warp_cmd(source, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert "does not exist" in proc.stderr and str(out.parent) in proc.stderr
    assert sqlite_ledger.rows() == []


@pytest.fixture
def mount_point(tmp_path):
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    subprocess.run(["umount", str(point)], capture_output=True)


def mount_or_skip(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here: {proc.stderr.strip()}")


def test_idem_read_only_destination_is_refused(sqlite_ledger, source, mount_point):
    mount_or_skip(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount_point)])
    out = mount_point / "o.tif"
    proc = run(warp_cmd(source, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert "not writable" in proc.stderr
    assert sqlite_ledger.rows() == []


def test_idem_full_disk_fails_cleanly_and_releases(sqlite_ledger, source, mount_point):
    mount_or_skip(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)])
    out = mount_point / "o.tif"
    proc = run(warp_cmd(source, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert not out.exists()
    assert temp_dirs_beside(out) == []
    rows = sqlite_ledger.rows()
    assert all(r["completed_at"] is None for r in rows)
    # Released at once: a retry with room to write claims immediately.
    assert all(r["released_at"] is not None for r in rows)


def test_idem_full_disk_keeps_the_previous_output(sqlite_ledger, source, mount_point):
    """A rebuild over a completed output that runs out of space fails, and the completed output
    and its row are still there, untouched (the pre-delete is cancelled, not carried out)."""
    mount_or_skip(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)])
    out = mount_point / "o.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(warp_cmd(source, out, "-ts", "32", "32"), env=env, check=True)
    before = file_state(out)
    proc = run(warp_cmd(source, out), env=env)
    assert proc.returncode != 0
    assert file_state(out) == before
    assert temp_dirs_beside(out) == []
    completed = [r for r in sqlite_ledger.rows() if r["completed_at"] is not None]
    assert len(completed) == 1 and completed[0]["output_size"] == before[2]


def test_a_png_tile_needs_no_room_for_a_scratch_geotiff(sqlite_ledger, source, mount_point):
    """A CreateCopy-only format (PNG) is copied from the warped VRT, as gdalwarp copies it: no
    uncompressed GeoTIFF of the tile is written beside the output. On a disk with room for the
    PNG (as plain gdalwarp needs) but not for the 256 KB of uncompressed pixels, the tile is
    made, identical to plain gdalwarp's, and nothing else is left there."""
    mount_or_skip(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount_point)])
    tile = ("-dstalpha", "-ts", "256", "256", "-co", "FORMAT=PNG")
    out = mount_point / "t.png"
    run(warp_cmd(source, out, *tile), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn), check=True)
    plain = mount_point.parent / "plain.png"
    run(["gdalwarp", "-q", "-of", "PNG", "-t_srs", "EPSG:3857", "-r", "bilinear", "-dstalpha",
         "-ts", "256", "256", source, str(plain)], check=True)
    assert (read_pixels(str(out)) == read_pixels(str(plain))).all()
    assert sorted(os.listdir(mount_point)) == ["t.png", "t.png.aux.xml"]
    [row] = sqlite_ledger.rows()
    assert row["completed_at"] is not None and row["output_size"] == out.stat().st_size


def test_idem_unreachable_ledger_fails_without_password(source, tmp_path):
    out = tmp_path / "o.tif"
    proc = run(warp_cmd(source, out),
               env=env_with(IDEM_LEDGER="postgresql://etl:s3cretpw@127.0.0.1:9/ledger"))
    assert proc.returncode != 0
    assert "s3cretpw" not in proc.stderr + proc.stdout
    assert "127.0.0.1" in proc.stderr
    assert not out.exists()


def test_idem_missing_source_fails_the_work_naming_it(sqlite_ledger, source, tmp_path):
    # A VRT whose underlying file disappears after gdalwarp opened it: the key records it as
    # missing (docs/keys.md, "Missing sources"), and the warp, which reads it, fails as GDAL
    # does, naming it: nothing written, nothing completed, the claim released at once.
    vrt = tmp_path / "mosaic.vrt"
    gdal.BuildVRT(str(vrt), [source])
    os.rename(source, str(tmp_path / "moved.tif"))
    out = tmp_path / "o.tif"
    proc = run(warp_cmd(str(vrt), out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert "scene.tif" in proc.stderr
    assert not out.exists()
    rows = sqlite_ledger.rows()
    assert all(r["completed_at"] is None and r["released_at"] is not None for r in rows), rows


def test_idem_unreadable_source_fails_without_claim(sqlite_ledger, source, tmp_path):
    # A VRT whose underlying file is there but no longer opens: IDEM cannot digest it.
    vrt = tmp_path / "mosaic.vrt"
    gdal.BuildVRT(str(vrt), [source])
    with open(source, "r+b") as f:
        f.write(b"\0" * 64)
    out = tmp_path / "o.tif"
    proc = run(warp_cmd(str(vrt), out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert "scene.tif" in proc.stderr
    assert not out.exists()
    assert sqlite_ledger.rows() == []
