# SPDX-License-Identifier: MIT
"""`make demo` end to end: scripts/demo makes a 4096x4096 three-band UTM scene with GDAL's tools,
renders it as a pyramid of a few hundred EPSG:3857 tiles through IDEM with `xargs -P 2 gdalwarp`,
kills the batch a third of the way in, resumes it, reruns it, changes the resampling of one zoom
level, and exports the ledger. This test runs it once (about a minute and a half on two idle
cores) into a temporary directory and checks its claims against the ledger itself:

- the source is what the demo says it is;
- the resume built only the missing tiles and none twice;
- the no-op rerun built nothing;
- only the changed zoom level was rebuilt, and `gdal-idem explain --last` names the resampling;
- the coverage file and the overview exist, and the summary gives the timings.

Skip it with IDEM_SKIP_DEMO=1 (or `-k "not demo"`)."""

import os
import sqlite3
import subprocess

import pytest
from osgeo import gdal, ogr

from idem_testlib import BUILD_DIR, PLUGIN_DIR, ROOT

# A minute and more: the test matrix's share (IDEM_TEST_SHARE=smoke) leaves it to Debian 12's run;
# the differential and warp engine tests check the demo's warps on each GDAL there.
pytestmark = pytest.mark.whole_only

DEMO_TIMEOUT = 900  # generous: the claim is 3 minutes on 2 idle cores; CI machines are shared


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if os.environ.get("IDEM_SKIP_DEMO") == "1":
        pytest.skip("IDEM_SKIP_DEMO=1")
    out = tmp_path_factory.mktemp("demo") / "demo-output"
    env = dict(os.environ, GDAL_DRIVER_PATH=PLUGIN_DIR, IDEM_BUILD_DIR=BUILD_DIR,
               DEMO_OUTPUT=str(out))
    for name in list(env):
        if name.startswith("IDEM_") and name not in ("IDEM_BUILD_DIR",):
            del env[name]
    proc = subprocess.run([os.path.join(ROOT, "scripts", "demo")], env=env, cwd=str(out.parent),
                          capture_output=True, text=True, timeout=DEMO_TIMEOUT)
    assert proc.returncode == 0, (f"scripts/demo exited {proc.returncode}\n--- stdout ---\n"
                                  f"{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    summary = {}
    with open(out / "summary.txt") as f:
        for line in f:
            key, _, value = line.strip().partition("=")
            summary[key] = value
    return out, proc.stdout, summary


def ledger_rows(out):
    conn = sqlite3.connect(str(out / "ledger.sqlite"))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM ledger")]
    finally:
        conn.close()


def test_demo_source_is_a_large_projected_three_band_scene(demo):
    out, stdout, s = demo
    scene = gdal.Open(str(out / "source" / "scene.tif"))
    assert scene.RasterXSize >= 4096 and scene.RasterYSize >= 4096
    assert scene.RasterCount == 3
    srs = scene.GetSpatialRef()
    assert srs is not None and srs.IsProjected()
    # nothing but the scene and its internal overviews: logs beside a source would re-key it
    assert sorted(os.listdir(out / "source")) == ["scene.tif"]
    assert scene.GetRasterBand(1).GetOverviewCount() >= 3


def test_demo_resume_builds_only_missing_tiles_and_none_twice(demo):
    out, stdout, s = demo
    tiles = int(s["tiles"])
    assert tiles >= 200
    assert 0 < int(s["first_run_completed"]) < tiles
    assert int(s["resume_built"]) == tiles - int(s["first_run_completed"])
    assert int(s["resume_skipped"]) == int(s["first_run_completed"])
    assert int(s["noop_skipped"]) == tiles
    rows = ledger_rows(out)
    live = [r for r in rows if r["superseded_at"] is None]
    # One completed row per tile, one output per row: no tile built twice for the same work.
    assert len(live) == tiles
    assert all(r["completed_at"] is not None for r in rows)
    assert len({r["output_uri"] for r in live}) == tiles
    files = [os.path.join(d, f) for d, _, fs in os.walk(out / "tiles") for f in fs
             if f.endswith(".png")]
    assert len(files) == tiles
    assert not [d for d, _, _ in os.walk(out / "tiles") if ".idem-tmp-" in d]
    # Attempts: one per tile, plus one per tile the killed workers held (taken over once).
    assert all(r["attempt"] in (1, 2) for r in rows)
    assert int(s["attempts"]) == tiles + int(s["taken_over"])
    assert int(s["taken_over"]) <= int(s["first_run_in_flight"])
    assert "none built twice" in stdout


def test_demo_resampling_change_rebuilds_one_zoom_and_explain_names_it(demo):
    out, stdout, s = demo
    zoom = int(s["changed_zoom"])
    rows = ledger_rows(out)
    zoom_tiles = len({r["output_uri"] for r in rows if r["tile_z"] == zoom})
    assert int(s["change_built"]) == zoom_tiles
    assert int(s["superseded"]) == zoom_tiles
    assert int(s["change_skipped"]) == int(s["tiles"]) - zoom_tiles
    superseded = [r for r in rows if r["superseded_at"] is not None]
    assert {r["tile_z"] for r in superseded} == {zoom}
    explain = (out / "explain.txt").read_text()
    assert "resampl" in explain.lower(), explain
    assert "explain --last" in stdout


def test_demo_writes_coverage_and_overview(demo):
    out, stdout, s = demo
    coverage = ogr.Open(str(out / "coverage.gpkg"))
    assert coverage is not None
    layer = coverage.GetLayer(0)
    assert layer.GetFeatureCount() == len(ledger_rows(out))
    overview = gdal.Open(str(out / f"overview-z{s['changed_zoom']}.png"))
    assert overview is not None and overview.RasterXSize >= 256
    assert "coverage.gpkg" in stdout and "overview-z" in stdout
    for label in ("first run (killed)", "resume", "no-op rerun"):
        assert label in stdout
    for key in ("first_run_seconds", "resume_seconds", "noop_seconds", "change_seconds",
                "source_seconds", "total_seconds"):
        assert float(s[key]) > 0, key
    zooms = {r["tile_z"] for r in ledger_rows(out)}
    assert len(zooms) >= 4, zooms
    assert "xargs -P 2 -L 1 gdalwarp" in stdout


def test_demo_writes_a_stac_catalog_of_its_tiles_and_rewrites_only_the_rebuilt_zoom(demo):
    """The demo exports the pyramid as STAC after the no-op rerun and again after the rebuild of
    one zoom: the second export writes the rebuilt tiles' items, removes those of the superseded
    completions, and leaves every other item as it was; the catalog reads and validates."""
    out, stdout, s = demo
    from test_stac_export import read_catalog
    zoom, tiles = int(s["changed_zoom"]), int(s["tiles"])
    rebuilt = int(s["change_built"])
    assert (int(s["stac_written"]), int(s["stac_removed"])) == (rebuilt, rebuilt)
    assert int(s["stac_unchanged"]) == tiles - rebuilt
    found = read_catalog(out / "stac")
    current = {r["work_key"]: r for r in ledger_rows(out)
               if r["completed_at"] is not None and r["superseded_at"] is None}
    assert set(found["items"]) == set(current)
    for key, item in found["items"].items():
        assert item["href"] == current[key]["output_uri"]
    assert sum(current[k]["tile_z"] == zoom for k in found["items"]) == rebuilt
    assert "stac/catalog.json" in stdout


def test_demo_rerun_after_the_demo_skips(demo):
    """Keys are stable after the demo: nothing it writes at the end (logs, summary, coverage,
    overview) lands beside the source, where GDAL would count it as part of the source."""
    out, stdout, s = demo
    with open(out / "jobs.txt") as f:
        sample = f.read().splitlines()[::13]
    env = dict(os.environ, GDAL_DRIVER_PATH=PLUGIN_DIR, IDEM_LEDGER=f"sqlite:{out}/ledger.sqlite",
               IDEM_NAMESPACE="demo")
    for line in sample:
        proc = subprocess.run(["gdalwarp"] + line.split(), cwd=str(out), env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "IDEM: skipped" in proc.stderr, f"{line}\n{proc.stderr}"


def test_demo_refuses_to_wipe_a_foreign_directory(tmp_path):
    foreign = tmp_path / "precious"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    env = dict(os.environ, GDAL_DRIVER_PATH=PLUGIN_DIR, IDEM_BUILD_DIR=BUILD_DIR,
               DEMO_OUTPUT=str(foreign))
    proc = subprocess.run([os.path.join(ROOT, "scripts", "demo")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert (foreign / "keep.txt").read_text() == "mine"
