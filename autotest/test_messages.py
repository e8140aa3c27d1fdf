"""What the driver says goes through GDAL's error handler, never straight to stdout or stderr,
and what a dry run finds is returned as metadata (docs/configuration.md, "What a run prints";
docs/cli.md)."""

import json
import os
import subprocess

from idem_testlib import GDAL_IDEM, INSTALLED, env_with, make_source, run, sqlite_ledger  # noqa: F401

import pytest
from osgeo import gdal

PYTHON = "/usr/bin/python3"

# Warps `src` into `dst` through IDEM with osgeo.gdal, under a Python error handler that
# collects what GDAL reports; prints the collected messages as JSON on stdout.
CAPTURING_WARP = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
seen = []
def handler(severity, number, message):
    seen.append([severity, message])
gdal.PushErrorHandler(handler)
gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
print(json.dumps(seen))
"""

QUIET_WARP = """
import sys
from osgeo import gdal
gdal.UseExceptions()
gdal.PushErrorHandler("CPLQuietErrorHandler")
gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
"""

RASTERIO_COPY = """
import logging, sys
import rasterio, rasterio.shutil
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="LOGGED %(message)s")
rasterio.shutil.copy(sys.argv[1], sys.argv[2], driver="IDEM")
"""

DRY_RUN_METADATA = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
gdal.PushErrorHandler("CPLQuietErrorHandler")
ds = gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
print(json.dumps(ds.GetMetadata("IDEM")))
"""


def python(code, *args, env):
    return run([PYTHON, "-c", code, *args], env=env, check=True)


def run_twice(code, tmp_path, ledger):
    """Runs `code` on a new source and output, then again (a skip): the output and both runs."""
    source = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    first = python(code, source, f"/vsiidem/{out}", env=env)
    before = os.stat(out).st_mtime_ns
    again = python(code, source, f"/vsiidem/{out}", env=env)
    assert os.stat(out).st_mtime_ns == before
    assert [r["attempt"] for r in ledger.completed()] == [1]
    return out, first, again


def test_skip_notice_reaches_the_python_error_handler(tmp_path, sqlite_ledger):
    out, first, again = run_twice(CAPTURING_WARP, tmp_path, sqlite_ledger)
    assert not any("IDEM: skipped" in m for _, m in json.loads(first.stdout))
    seen = json.loads(again.stdout)
    skips = [(severity, m) for severity, m in seen if m.startswith("IDEM: skipped ")]
    assert len(skips) == 1 and skips[0][0] == gdal.CE_Warning, seen
    assert str(out) in skips[0][1]
    # Captured, so never printed by the driver itself.
    assert "IDEM: skipped" not in again.stderr


def test_skip_notice_is_silenced_by_a_quiet_handler(tmp_path, sqlite_ledger):
    _, _, again = run_twice(QUIET_WARP, tmp_path, sqlite_ledger)
    assert again.stdout == "" and again.stderr == ""


def test_rasterio_logs_the_skip_notice(tmp_path, sqlite_ledger):
    out, _, again = run_twice(RASTERIO_COPY, tmp_path, sqlite_ledger)
    logged = [line for line in again.stdout.splitlines() if line.startswith("LOGGED ")]
    assert any("IDEM: skipped " + str(out) in line for line in logged), again.stdout
    assert "IDEM: skipped" not in again.stderr


MOSAIC_CALLS = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
seen = {}
for name in ("warp", "translate"):
    seen[name] = []
    gdal.PushErrorHandler(lambda severity, number, message: seen[name].append(message))
    out = sys.argv[2] + "." + name + ".tif"
    if name == "warp":
        gdal.Warp(out, sys.argv[1].split(","), format="IDEM")
    else:
        gdal.Translate(out, gdal.BuildVRT("", sys.argv[1].split(",")), format="IDEM")
    gdal.PopErrorHandler()
print(json.dumps(seen))
"""


def test_a_plain_mosaic_from_gdal_warp_is_said_to_lack_the_warps_options(tmp_path, sqlite_ledger):
    """gdal.Warp hands IDEM a plain mosaic as gdalbuildvrt's VRT, without the warp's options
    (docs/keys.md, "Known differences"): a warning says so. gdal.Translate of such a VRT is the
    VRT's copy, as IDEM writes it: no warning."""
    a = make_source(tmp_path / "a.tif", size=64)
    b = make_source(tmp_path / "b.tif", size=64, origin=(500640.0, 4650000.0), seed=5)
    proc = python(MOSAIC_CALLS, f"{a},{b}", f"/vsiidem/{tmp_path}/out",
                  env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    seen = json.loads(proc.stdout)
    assert [m for m in seen["warp"] if "gdalbuildvrt's VRT" in m], seen
    assert seen["translate"] == [], seen
    assert len(sqlite_ledger.completed()) == 2


def test_dry_run_returns_its_report_as_metadata(tmp_path, sqlite_ledger):
    source = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_DRY_RUN="YES")
    proc = python(DRY_RUN_METADATA, source, f"/vsiidem/{out}", env=env)
    report = json.loads(proc.stdout)
    assert set(report) == {"KEY", "WORK", "DESTINATION"}
    assert report["DESTINATION"] == str(out)
    work = json.loads(report["WORK"])
    assert work["destination"] == str(out)
    # The key the CLI derives, from the same metadata, is the same.
    key = run([GDAL_IDEM, "key", "--json", "--", "gdalwarp", "-of", "IDEM", "-t_srs",
               "EPSG:3857", source, f"/vsiidem/{out}"], env=env, check=True)
    assert json.loads(key.stdout)["key"] == report["KEY"]
    assert json.loads(key.stdout)["work"] == work
    assert "IDEM dry run" not in key.stderr  # the command's result, not a warning
    assert not out.exists()
    assert sqlite_ledger.completed() == []


@pytest.mark.skipif(INSTALLED, reason="the installed plugin is in GDAL's own directory")
def test_cli_without_the_plugin_names_where_gdal_looked(tmp_path):
    source = make_source(tmp_path / "src.tif", size=64)
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    proc = run([GDAL_IDEM, "key", "--", "gdalwarp", "-of", "IDEM", "-t_srs", "EPSG:3857", source,
                f"/vsiidem/{tmp_path}/out.tif"], env=env_with(GDAL_DRIVER_PATH=empty))
    assert proc.returncode == 2, proc.stderr
    assert f"GDAL_DRIVER_PATH={empty}" in proc.stderr
    assert "gdal_IDEM.so" in proc.stderr
    assert proc.stdout == ""

