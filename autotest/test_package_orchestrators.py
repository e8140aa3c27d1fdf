# SPDX-License-Identifier: MIT
"""The gdal_idem package under Prefect 3 and Dagster (tools/pyenv/venv; docs/python.md): 32 tiles,
one of them held by a killed worker when the first run starts, run twice with one tile's source
republished between the runs. What the orchestrators' own APIs report is checked against the
ledger: Prefect's task-run states (Built, Skipped, Rebuilt) and the flow run's artifact; Dagster's
event log (materialisations for assets whose work changed, observations for the others) and data
versions (the work keys)."""

import collections
import hashlib
import json
import os

import pytest

from idem_testlib import (INSTALLED, PREFECT_STARTUP_SECONDS, ROOT, env_with, kill9,  # noqa: F401
                          lonlat_corners, make_source, run, sqlite_ledger, start_paused)

VENV_PYTHON = os.path.join(ROOT, "tools", "pyenv", "venv", "bin", "python")
SCRIPT = os.path.join(ROOT, "autotest", "orchestrated", "package_flows.py")
TILES = 32
KILLED, CHANGED = 3, 13  # the tile held by a killed worker; the tile whose source changes
LEASE = 3


@pytest.fixture
def batch(tmp_path, sqlite_ledger):
    if not os.path.exists(VENV_PYTHON):
        pytest.fail("the tests' Python venv is missing: run `make deps`")
    (tmp_path / "src").mkdir()
    for n in range(TILES):
        make_source(tmp_path / "src" / f"{n}.tif", size=16, seed=n)
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_STALE_SECONDS=LEASE, BATCH_DIR=tmp_path,
                   TILES=TILES, PREFECT_HOME=tmp_path / "prefect-home",
                   PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="WARNING",
                   PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=PREFECT_STARTUP_SECONDS,
                   DAGSTER_HOME=tmp_path / "dagster-home", DO_NOT_TRACK="1", IDEM_VERBOSE=None)
    (tmp_path / "dagster-home").mkdir()
    (tmp_path / "dagster-home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    if not INSTALLED:
        env["PYTHONPATH"] = os.path.join(ROOT, "python")
    return tmp_path, env, sqlite_ledger


def kill_a_worker_on(batch_dir, mode, env):
    """A worker of tile KILLED killed (SIGKILL) while it writes: its claim stays until its lease
    runs out, and the run must take it over."""
    (batch_dir / mode).mkdir()
    source, out = batch_dir / "src" / f"{KILLED}.tif", batch_dir / mode / f"{KILLED}.tif"
    worker = start_paused(["gdal_translate", "-q", "-of", "IDEM", "-co", f"LAYER={mode}", source,
                           f"/vsiidem/{out}"], env, "during_write")
    kill9(worker)


def run_script(mode, env):
    proc = run([VENV_PYTHON, SCRIPT, mode], env=env, timeout=900, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def completed(ledger, layer):
    return {os.path.basename(r["output_uri"]): r for r in ledger.completed()
            if r["layer"] == layer}


@pytest.mark.whole_only
def test_prefect_task_runs_say_built_skipped_rebuilt(batch):
    batch_dir, env, ledger = batch
    kill_a_worker_on(batch_dir, "prefect", env)
    first = run_script("prefect", env)
    assert collections.Counter(r["state"] for r in first["task_runs"]) == {"Built": TILES}
    assert {r["type"] for r in first["task_runs"]} == {"COMPLETED"}
    rows = completed(ledger, "prefect")
    assert len(rows) == TILES and rows[f"{KILLED}.tif"]["attempt"] == 2
    assert sum(r["attempt"] for r in rows.values()) == TILES + 1  # the killed tile built once
    by_output = {r["result"]["output"]: r for r in first["task_runs"]}
    for name, row in rows.items():
        result = by_output[row["output_uri"]]["result"]
        assert (result["key"], result["attempt"]) == (row["work_key"], row["attempt"])

    make_source(batch_dir / "src" / f"{CHANGED}.tif", size=16, seed=99)  # republished
    second = run_script("prefect", env)
    states = collections.Counter(r["state"] for r in second["task_runs"])
    assert states == {"Skipped": TILES - 1, "Rebuilt": 1}
    rebuilt = [r["result"] for r in second["task_runs"] if r["state"] == "Rebuilt"]
    assert os.path.basename(rebuilt[0]["output"]) == f"{CHANGED}.tif"
    assert rebuilt[0]["key"] == completed(ledger, "prefect")[f"{CHANGED}.tif"]["work_key"]
    artifact, = second["artifacts"]
    assert (artifact["key"], artifact["type"]) == ("gdal-idem-summary", "table")
    table = json.loads(artifact["data"]) if isinstance(artifact["data"], str) else \
        artifact["data"]
    counts = {row["outcome"]: row["outputs"] for row in table if row["outcome"] != "slowest"}
    assert counts == {"built": 0, "rebuilt": 1, "skipped": TILES - 1}
    assert "1 rebuilt" in artifact["description"]


def test_dagster_materialises_changed_work_and_observes_the_rest(batch):
    batch_dir, env, ledger = batch
    kill_a_worker_on(batch_dir, "dagster", env)
    first = run_script("dagster", env)
    assert first["success"]
    assets = first["assets"]
    assert sorted(assets) == [f"row_{r}" for r in range(TILES // 8)]
    assert {a["event"] for a in assets.values()} == {"materialization"}
    rows = completed(ledger, "dagster")
    assert len(rows) == TILES and rows[f"{KILLED}.tif"]["attempt"] == 2

    def version_of(row):  # the digest of the row's 8 outputs and keys (gdal_idem.dagster)
        lines = sorted(f"{rows[f'{n}.tif']['output_uri']} {rows[f'{n}.tif']['work_key']}\n"
                       for n in range(row * 8, row * 8 + 8))
        return hashlib.sha256("".join(lines).encode()).hexdigest()

    for row in range(TILES // 8):
        assert assets[f"row_{row}"]["data_version"] == version_of(row)
        assert assets[f"row_{row}"]["metadata"]["built"] == 8
        # The footprint holds every output of the row, and little more.
        where = assets[f"row_{row}"]["metadata"]["footprint"]
        assert where["type"] == "Polygon"
        [ring] = where["coordinates"]
        west, east = min(p[0] for p in ring), max(p[0] for p in ring)
        south, north = min(p[1] for p in ring), max(p[1] for p in ring)
        corners = [c for n in range(row * 8, row * 8 + 8)
                   for c in lonlat_corners(rows[f"{n}.tif"]["output_uri"])]
        assert west <= min(c[0] for c in corners) and east >= max(c[0] for c in corners)
        assert south <= min(c[1] for c in corners) and north >= max(c[1] for c in corners)
        assert max(min(c[0] for c in corners) - west, east - max(c[0] for c in corners),
                   min(c[1] for c in corners) - south, north - max(c[1] for c in corners)) < 1e-3

    make_source(batch_dir / "src" / f"{CHANGED}.tif", size=16, seed=99)  # in row 1
    second = run_script("dagster", env)
    rows = completed(ledger, "dagster")
    events = second["assets"]
    assert {name: e["event"] for name, e in events.items()} == {
        "row_0": "observation", "row_1": "materialization", "row_2": "observation",
        "row_3": "observation"}
    assert events["row_1"]["metadata"] == {**events["row_1"]["metadata"], "rebuilt": 1,
                                           "skipped": 7, "built": 0}
    assert events["row_1"]["data_version"] == version_of(1) != assets["row_1"]["data_version"]
    for row in (0, 2, 3):
        assert events[f"row_{row}"]["data_version"] == assets[f"row_{row}"]["data_version"]
        assert events[f"row_{row}"]["metadata"]["skipped"] == 8


FOOTPRINTS = """
import json, sys
from osgeo import gdal, osr
import gdal_idem.dagster as idem_dagster
gdal.UseExceptions()
def raster(name, epsg, x0, y0, pixel, size=10):
    ds = gdal.GetDriverByName("GTiff").Create(name, size, size, 1)
    ds.SetGeoTransform([x0, pixel, 0, y0, 0, -pixel])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(epsg)
    ds.SetSpatialRef(srs)
    ds = None
    return {"output": name}
d = sys.argv[1]
cases = {
    "two boxes": [raster(d + "/a.tif", 4326, 10, 50, 0.1), raster(d + "/b.tif", 4326, 11, 51, 0.1)],
    "past 180": [raster(d + "/c.tif", 4326, 179.5, 10, 0.1)],
    "mercator across": [raster(d + "/e.tif", 3857, 19900000, 1000000, 50000)],
    "both sides": [raster(d + "/c2.tif", 4326, 179.5, 10, 0.1),
                   raster(d + "/f.tif", 4326, -179.9, 10, 0.01)],
    "no georeferencing": [{"output": d + "/none.tif"}],
}
gdal.GetDriverByName("GTiff").Create(d + "/none.tif", 4, 4, 1)
print(json.dumps({name: idem_dagster.footprint(rs) for name, rs in cases.items()}))
"""


def test_dagster_footprint_is_split_at_the_antimeridian(batch):
    """gdal_idem.dagster.footprint(): the outputs' extent in longitude/latitude, a MultiPolygon
    of the two sides when it crosses the antimeridian (from a grid past 180 degrees, or from Web
    Mercator), None when nothing is georeferenced."""
    batch_dir, env, _ = batch
    proc = run([VENV_PYTHON, "-c", FOOTPRINTS, batch_dir], env=env, check=True)
    found = json.loads(proc.stdout)

    def extents(geometry):
        polygons = ([geometry["coordinates"]] if geometry["type"] == "Polygon"
                    else geometry["coordinates"])
        return [tuple(round(v, 3) for v in (min(p[0] for p in poly[0]), min(p[1] for p in poly[0]),
                                            max(p[0] for p in poly[0]), max(p[1] for p in poly[0])))
                for poly in polygons]

    assert found["two boxes"]["type"] == "Polygon"
    assert extents(found["two boxes"]) == [(10.0, 49.0, 12.0, 51.0)]
    for name in ("past 180", "both sides"):
        assert found[name]["type"] == "MultiPolygon", name
        assert extents(found[name]) == [(179.5, 9.0, 180.0, 10.0), (-180.0, 9.0, -179.5, 10.0)]
    west, east = extents(found["mercator across"])
    assert west[0] < 180 and west[2] == 180 and east[0] == -180 and east[2] < 0
    assert found["no georeferencing"] is None


def test_prefect_cache_key_is_the_idem_key(batch):
    """gdal_idem.prefect.cache_key: Prefect's cache keyed by the work's IDEM key (a dry run)."""
    batch_dir, env, ledger = batch
    code = """
import json, sys
import gdal_idem.prefect as idem_prefect
key_fn = idem_prefect.cache_key(lambda p: ("translate", p["dst"], p["src"], {"format": "PNG"}))
print(json.dumps(key_fn(None, {"dst": sys.argv[1], "src": sys.argv[2]})))
"""
    source, out = batch_dir / "src" / "0.tif", batch_dir / "0.png"
    proc = run([VENV_PYTHON, "-c", code, out, source], env=env, check=True)
    key = json.loads(proc.stdout)
    assert not out.exists() and ledger.rows() == []
    built = run([VENV_PYTHON, "-c", "import sys, gdal_idem; print(gdal_idem.translate("
                 "sys.argv[1], sys.argv[2], format='PNG').key)", out, source], env=env,
                check=True)
    assert built.stdout.strip() == key == ledger.completed()[0]["work_key"]
