# SPDX-License-Identifier: MIT
"""IDEM under real orchestrators: Prefect 3, Dagster and Dask distributed, from the tests' venv
(tools/pyenv/venv, pinned with hashes; it sees Debian's osgeo.gdal, whose libgdal loads the
plugin). Each test runs a batch of EPSG:3857 tiles over one source (autotest/orchestrated/), kills
the warps of some tiles at a pause point at their first attempt (the warp's process, SIGKILL),
lets the orchestrator retry or reschedule them, and checks what users rely on: every tile
completed exactly once in the ledger (attempt 2 for the killed tiles, 1 for the others), pixels
equal to plain gdalwarp's, no temporary file left, and a second run that warps nothing."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import uuid

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, PREFECT_STARTUP_SECONDS, ROOT, assert_same_pixels, env_with,
                          file_state, make_ledger, make_source, run, temp_dirs_beside,
                          wait_until_leases_expired)

VENV_PYTHON = os.path.join(ROOT, "tools", "pyenv", "venv", "bin", "python")
ORCHESTRATED = os.path.join(ROOT, "autotest", "orchestrated")
sys.path.insert(0, ORCHESTRATED)
from tiles import WARP  # noqa: E402

LEASE = 5  # IDEM_STALE_SECONDS of the batches: under the retry delay, so a retry never waits
GRID = 8   # 8 x 8 = 64 tiles


# The test matrix's share (IDEM_TEST_SHARE=smoke, conftest.py) runs two of these tests, one per way
# a task is retried (Prefect's retries, Dask's rescheduling), and test_package_orchestrators.py's
# Prefect and Dagster tests. The others are marked whole_only.


@pytest.fixture(autouse=True)
def _venv():
    if not os.path.exists(VENV_PYTHON):
        pytest.fail("the tests' Python venv is missing: run `make deps` "
                    "(scripts/install-deps makes tools/pyenv/venv)")


def make_batch(tmp_path, kill=(), republish=(), grid=GRID, kill_at="before_complete"):
    """The batch's directory: a source, batch.json (the tiles, which to kill, at which pause
    point), and the plain gdalwarp output of every tile under plain/ to compare with."""
    batch_dir = tmp_path / "batch"
    batch_dir.mkdir()
    source = make_source(batch_dir / "scene.tif", size=512)
    extent = gdal.Warp("", source, format="VRT", dstSRS="EPSG:3857")
    x0, dx, _, y0, _, dy = extent.GetGeoTransform()
    x1, y1 = x0 + dx * extent.RasterXSize, y0 + dy * extent.RasterYSize
    extent = None
    step_x, step_y = (x1 - x0) / grid, (y0 - y1) / grid
    tiles = {f"{i}_{j}": [x0 + i * step_x, y0 - (j + 1) * step_y, x0 + (i + 1) * step_x,
                          y0 - j * step_y] for i in range(grid) for j in range(grid)}
    (batch_dir / "batch.json").write_text(json.dumps(
        {"source": source, "tiles": tiles, "kill": sorted(kill), "republish": sorted(republish),
         "kill_at": kill_at}))
    return batch_dir, sorted(tiles)


def plain_gdalwarp(batch_dir, name, target_dir):
    """The tile as plain gdalwarp writes it (GTiff, same arguments)."""
    spec = json.loads((batch_dir / "batch.json").read_text())
    target_dir.mkdir(exist_ok=True)
    target = target_dir / f"{name}.tif"
    xmin, ymin, xmax, ymax = spec["tiles"][name]
    run(["gdalwarp", "-q", "-overwrite", "-of", "GTiff", *WARP, "-te", repr(xmin), repr(ymin),
         repr(xmax), repr(ymax), spec["source"], target], check=True)
    return target


def batch_env(tmp_path, ledger, batch_dir, **extra):
    return env_with(IDEM_LEDGER=ledger.dsn, IDEM_STALE_SECONDS=LEASE, BATCH_DIR=batch_dir,
                    PYTHONPATH=ORCHESTRATED, PREFECT_HOME=tmp_path / "prefect",
                    PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING",
                    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=PREFECT_STARTUP_SECONDS,
                    DAGSTER_HOME=tmp_path / "dagster", DO_NOT_TRACK="1", **extra)


def start_orchestrated(script, *args, env, log):
    """Starts an orchestrator script in a session of its own, its output in `log`."""
    with open(log, "w", encoding="utf-8") as out:
        return subprocess.Popen([VENV_PYTHON, os.path.join(ORCHESTRATED, script), *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def finish_orchestrated(proc, log, expect_exit=0):
    """Waits for the script, then ends what it left behind in its session (a flow run killed
    with SIGKILL leaves Prefect's ephemeral API server running); returns its output."""
    try:
        proc.wait(timeout=1800)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    output = pathlib.Path(log).read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == expect_exit, (
        f"{' '.join(proc.args[1:])} exited {proc.returncode}\n{output[-20000:]}")
    return output


def run_orchestrated(script, *args, env, expect_exit=0):
    log = os.path.join(env["BATCH_DIR"], "..", f"{script}-{uuid.uuid4().hex[:8]}.log")
    return finish_orchestrated(start_orchestrated(script, *args, env=env, log=log), log,
                               expect_exit)


def tile_rows(ledger, batch_dir):
    """The ledger's rows of the batch, by tile name."""
    rows = {}
    for row in ledger.rows():
        name = os.path.basename(row["output_uri"])[:-len(".tif")]
        assert os.path.dirname(row["output_uri"]) == str(batch_dir / "tiles"), row["output_uri"]
        rows.setdefault(name, []).append(row)
    return rows


def assert_batch_done(ledger, batch_dir, names, killed, plain_dir):
    """Every tile completed exactly once (attempt 2 when its first attempt was killed, else 1),
    its output equal to plain gdalwarp's, nothing else in the tiles' directory."""
    rows = tile_rows(ledger, batch_dir)
    assert sorted(rows) == names
    for name in names:
        assert len(rows[name]) == 1, rows[name]
        row = rows[name][0]
        assert row["completed_at"] is not None and row["superseded_at"] is None, row
        assert row["attempt"] == (2 if name in killed else 1), (name, row["attempt"])
        assert_same_pixels(batch_dir / "tiles" / f"{name}.tif",
                           plain_gdalwarp(batch_dir, name, plain_dir))
    assert sorted(os.listdir(batch_dir / "tiles")) == sorted(f"{n}.tif" for n in names)
    assert temp_dirs_beside(batch_dir / "tiles" / "x.tif") == []


def states(batch_dir, names):
    return {n: file_state(batch_dir / "tiles" / f"{n}.tif") for n in names}


def row_identities(ledger):
    return sorted((r["work_key"], r["claim_token"], r["attempt"], str(r["completed_at"]))
                  for r in ledger.rows())


def assert_run_again_changes_nothing(ledger, batch_dir, names, script, *args, env):
    """The whole batch again: every tile skips; no file is rewritten, no row changes."""
    before, rows_before = states(batch_dir, names), row_identities(ledger)
    run_orchestrated(script, *args, env=env)
    assert states(batch_dir, names) == before
    assert row_identities(ledger) == rows_before


@pytest.mark.whole_only
def test_prefect_retries_gdalwarp_tiles_killed_at_their_first_attempt(tmp_path):
    ledger = make_ledger("postgresql", tmp_path)
    killed = {f"{i}_{i}" for i in range(GRID)} | {f"{i}_{GRID - 1 - i}" for i in range(GRID)}
    assert len(killed) == GRID * GRID // 4
    batch_dir, names = make_batch(tmp_path, kill=killed)
    env = batch_env(tmp_path, ledger, batch_dir)

    run_orchestrated("prefect_flow.py", "gdalwarp", env=env)

    assert sorted(os.listdir(batch_dir / "killed")) == sorted(killed)
    assert_batch_done(ledger, batch_dir, names, killed, tmp_path / "plain")
    assert_run_again_changes_nothing(ledger, batch_dir, names, "prefect_flow.py", "gdalwarp",
                                     env=env)


@pytest.mark.whole_only
def test_two_prefect_flows_racing_on_the_same_tiles_warp_each_tile_once(tmp_path):
    ledger = make_ledger("postgresql", tmp_path)
    batch_dir, names = make_batch(tmp_path)
    flows = []
    for n in range(2):  # each flow its own Prefect home (its own ephemeral API server)
        env = batch_env(tmp_path, ledger, batch_dir, FLOW_BARRIER=2)
        env["PREFECT_HOME"] = str(tmp_path / f"prefect-{n}")
        log = tmp_path / f"flow-{n}.log"
        flows.append((start_orchestrated("prefect_flow.py", "gdalwarp", env=env, log=log), log))
    try:
        for proc, log in flows:
            output = finish_orchestrated(proc, log)
            assert json.loads(output.strip().splitlines()[-1]) == [
                str(batch_dir / "tiles" / f"{n}.tif") for n in names]
    finally:
        for proc, _ in flows:  # the other flow too, when one failed
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert len(os.listdir(batch_dir / "barrier")) == 2
    # One claim per tile, never taken over: no tile was warped by both flows.
    assert_batch_done(ledger, batch_dir, names, set(), tmp_path / "plain")


@pytest.mark.whole_only
def test_prefect_flow_of_gdal_warp_tasks_killed_and_run_again_converges(tmp_path):
    """gdal.Warp in the flow's own process (Prefect's thread pool): the warp of a tile reaching
    the pause point kills the whole flow run (SIGKILL), with other tiles in flight; the flow is
    run again, as an orchestrator reruns a crashed run."""
    ledger = make_ledger("sqlite", tmp_path)
    batch_dir, names = make_batch(tmp_path, kill={"3_4"})
    env = batch_env(tmp_path, ledger, batch_dir)
    run_orchestrated("prefect_flow.py", "gdal.Warp", env=env, expect_exit=-9)
    assert os.listdir(batch_dir / "killed") == ["3_4"]
    in_flight = {name for name, rows in tile_rows(ledger, batch_dir).items()
                 if rows[0]["completed_at"] is None}
    assert "3_4" in in_flight  # its output is in place (the pause is after the publish), not done

    run_orchestrated("prefect_flow.py", "gdal.Warp", env=env)
    assert_batch_done(ledger, batch_dir, names, in_flight, tmp_path / "plain")
    assert_run_again_changes_nothing(ledger, batch_dir, names, "prefect_flow.py", "gdal.Warp",
                                     env=env)


def test_prefect_retry_after_the_source_is_republished_gets_a_new_key(tmp_path):
    """The source changes between a task's first attempt (killed once it wrote its tile, before
    it published it) and its retry: the retry is new work (a new key) on the new pixels; the
    first attempt's claim is never completed, and `gdal-idem reap` releases it and removes its
    temporary directory."""
    ledger = make_ledger("sqlite", tmp_path)
    batch_dir, names = make_batch(tmp_path, kill={"0_0"}, republish={"0_0"}, grid=1,
                                  kill_at="before_commit")
    env = batch_env(tmp_path, ledger, batch_dir)
    run_orchestrated("prefect_flow.py", "gdalwarp", env=env)

    first, retry = tile_rows(ledger, batch_dir)["0_0"]
    assert first["work_key"] != retry["work_key"]
    assert first["completed_at"] is None and first["released_at"] is None
    assert retry["completed_at"] is not None and retry["attempt"] == 1
    assert_same_pixels(batch_dir / "tiles" / "0_0.tif",
                       plain_gdalwarp(batch_dir, "0_0", tmp_path / "plain"))
    assert len(temp_dirs_beside(batch_dir / "tiles" / "0_0.tif")) == 1  # the killed attempt's

    wait_until_leases_expired(ledger)
    reap = run([GDAL_IDEM, "reap"], env=env)
    assert reap.returncode == 1, reap.stderr  # something was released
    first_after, retry_after = tile_rows(ledger, batch_dir)["0_0"]
    assert first_after["work_key"] == first["work_key"]
    assert first_after["released_at"] is not None and first_after["completed_at"] is None
    assert retry_after == retry
    assert temp_dirs_beside(batch_dir / "tiles" / "0_0.tif") == []


@pytest.mark.whole_only
def test_prefect_dask_task_runner_survives_a_worker_killed_mid_warp(tmp_path):
    """gdal.Warp in the worker processes of prefect-dask's DaskTaskRunner (3 workers): a tile's
    first attempt kills its worker at the pause point; Dask restarts it and runs the task
    again."""
    ledger = make_ledger("postgresql", tmp_path)
    batch_dir, names = make_batch(tmp_path, kill={"6_1"})
    env = batch_env(tmp_path, ledger, batch_dir)
    run_orchestrated("prefect_flow.py", "dask", env=env)
    assert os.listdir(batch_dir / "killed") == ["6_1"]
    assert_batch_done(ledger, batch_dir, names, {"6_1"}, tmp_path / "plain")


@pytest.mark.whole_only
def test_dagster_retry_policy_on_the_multiprocess_executor(tmp_path):
    """One op run per row of tiles (each in its own process), under a RetryPolicy: a killed
    warp fails the op, and its retry skips the row's completed tiles."""
    ledger = make_ledger("sqlite", tmp_path)
    killed = {f"{i}_{j}" for i in range(GRID) for j in range(GRID) if (i + j) % 4 == 2}
    batch_dir, names = make_batch(tmp_path, kill=killed)
    env = batch_env(tmp_path, ledger, batch_dir)
    (tmp_path / "dagster").mkdir()
    (tmp_path / "dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    run_orchestrated("dagster_job.py", env=env)
    assert sorted(os.listdir(batch_dir / "killed")) == sorted(killed)
    assert_batch_done(ledger, batch_dir, names, killed, tmp_path / "plain")
    assert_run_again_changes_nothing(ledger, batch_dir, names, "dagster_job.py", env=env)


def test_dask_local_cluster_reschedules_the_tile_of_a_killed_worker(tmp_path):
    ledger = make_ledger("sqlite", tmp_path)
    batch_dir, names = make_batch(tmp_path, kill={"5_2"})
    env = batch_env(tmp_path, ledger, batch_dir)
    run_orchestrated("dask_batch.py", env=env)
    assert os.listdir(batch_dir / "killed") == ["5_2"]
    assert_batch_done(ledger, batch_dir, names, {"5_2"}, tmp_path / "plain")
    assert_run_again_changes_nothing(ledger, batch_dir, names, "dask_batch.py", env=env)
