# SPDX-License-Identifier: MIT
"""pytest configuration shared by the suite, and the helpers of the key tests (test_key_*.py):
where the built plugin and `gdal-idem` are (IDEM_BUILD_DIR, default /work/main/build), and how
to get the idempotency key a command would get, through the IDEM driver's dry run
(IDEM_DRY_RUN=YES: nothing is written) or `gdal-idem key`."""

import json
import os
import re
import subprocess
import sys

import pytest

AUTOTEST_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(AUTOTEST_DIR)
DATA_DIR = os.path.join(AUTOTEST_DIR, "data")
BUILD_DIR = os.environ.get("IDEM_BUILD_DIR", os.path.join(ROOT, "build"))
# The tools run under Debian's python (osgeo, rasterio), whatever python runs pytest.
SYSTEM_PYTHON = "/usr/bin/python3"

_KEY_LINE = re.compile(r"IDEM dry run: key=([0-9a-f]{64})")

if AUTOTEST_DIR not in sys.path:
    sys.path.insert(0, AUTOTEST_DIR)

from idem_testlib import GDAL_IDEM as GDAL_IDEM_BIN, PLUGIN_DIR, set_driver_path  # noqa: E402


def key_env(**extra):
    """The environment for a dry run: the built plugin only, IDEM_DRY_RUN on, no inherited
    IDEM_* settings; `extra` adds or (with None) removes variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
    set_driver_path(env)
    env["IDEM_DRY_RUN"] = "YES"
    for name, value in extra.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = str(value)
    return env


def _run(args, cwd=None, env=None):
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env or key_env(),
                          capture_output=True, text=True, timeout=300)
    return proc


def _key_from(proc, what):
    match = _KEY_LINE.search(proc.stderr)  # the driver's warning (or a logged one)
    if proc.returncode != 0 or not match:
        raise AssertionError(f"{what} gave no key (exit {proc.returncode})\nstdout:\n"
                             f"{proc.stdout}\nstderr:\n{proc.stderr}")
    return match.group(1)


def dry_run_key(program, args, cwd=None, **env):
    """Key of `program args` (gdalwarp or gdal_translate, with -of IDEM and a /vsiidem/ output)."""
    proc = _run([program] + list(args), cwd=cwd, env=key_env(**env))
    return _key_from(proc, f"{program} {' '.join(map(str, args))}")


def python_key(code, cwd=None, **env):
    """Key of a Python snippet run under the system python (osgeo.gdal / rasterio)."""
    proc = _run([SYSTEM_PYTHON, "-c", code], cwd=cwd, env=key_env(**env))
    return _key_from(proc, f"python snippet:\n{code}")


def gdal_warp_key(src, dst, cwd=None, **warp_kwargs):
    """Key of gdal.Warp(dst, src, format="IDEM", **warp_kwargs)."""
    code = ("from osgeo import gdal\ngdal.UseExceptions()\n"
            f"gdal.Warp({dst!r}, {src!r}, format='IDEM', **{warp_kwargs!r})\n")
    return python_key(code, cwd=cwd)


def gdal_translate_key(src, dst, cwd=None, **translate_kwargs):
    code = ("from osgeo import gdal\ngdal.UseExceptions()\n"
            f"gdal.Translate({dst!r}, {src!r}, format='IDEM', **{translate_kwargs!r})\n")
    return python_key(code, cwd=cwd)


def rasterio_warp_key(src, dst, crs, resampling="nearest", cwd=None, **vrt_kwargs):
    """Key of rasterio.shutil.copy(WarpedVRT(src, crs=crs, ...), dst, driver="IDEM")."""
    code = ("import logging, rasterio, rasterio.shutil\n"
            "from rasterio.vrt import WarpedVRT\n"
            "logging.basicConfig()  # rasterio logs GDAL's warnings, the dry run's report too\n"
            "from rasterio.enums import Resampling\n"
            f"with rasterio.open({src!r}) as s:\n"
            f"    with WarpedVRT(s, crs={crs!r}, resampling=Resampling.{resampling},"
            f" **{vrt_kwargs!r}) as v:\n"
            f"        rasterio.shutil.copy(v, {dst!r}, driver='IDEM')\n")
    return python_key(code, cwd=cwd)


def cli_key(args, cwd=None, as_json=False, **env):
    """`gdal-idem key [--json] -- ARGS`: the key (and with as_json, the parsed report)."""
    command = [GDAL_IDEM_BIN, "key"] + (["--json"] if as_json else []) + ["--"] + list(args)
    proc = _run(command, cwd=cwd, env=key_env(IDEM_DRY_RUN=None, **env))
    if proc.returncode != 0:
        raise AssertionError(f"gdal-idem key failed (exit {proc.returncode})\nstdout:\n"
                             f"{proc.stdout}\nstderr:\n{proc.stderr}")
    if as_json:
        return json.loads(proc.stdout)
    return proc.stdout.strip().split()[-1]


def run_dry(program, args, cwd=None, **env):
    """Run a dry run and return the CompletedProcess (for error tests)."""
    return _run([program] + list(args), cwd=cwd, env=key_env(**env))


def write_raster(path, width=40, height=30, bands=1, epsg=32631, origin=(500000.0, 4600000.0),
                 pixel=10.0, nodata=None, seed=3):
    """A small deterministic GeoTIFF written with osgeo.gdal under the system python."""
    code = f"""
import numpy as np
from osgeo import gdal, osr
gdal.UseExceptions()
ds = gdal.GetDriverByName("GTiff").Create({str(path)!r}, {width}, {height}, {bands}, gdal.GDT_Byte)
ds.SetGeoTransform([{origin[0]!r}, {pixel!r}, 0, {origin[1]!r}, 0, -{pixel!r}])
srs = osr.SpatialReference(); srs.ImportFromEPSG({epsg})
ds.SetProjection(srs.ExportToWkt())
rng = np.random.default_rng({seed})
for b in range({bands}):
    band = ds.GetRasterBand(b + 1)
    band.WriteArray(rng.integers(1, 250, ({height}, {width})).astype(np.uint8))
    if {nodata!r} is not None:
        band.SetNoDataValue({nodata!r})
ds = None
"""
    subprocess.run([SYSTEM_PYTHON, "-c", code], check=True, env=key_env())
    return str(path)


@pytest.fixture
def key_source(tmp_path):
    """A one-band source (no nodata) in tmp_path/src/scene.tif."""
    (tmp_path / "src").mkdir()
    return write_raster(tmp_path / "src" / "scene.tif")


@pytest.fixture
def key_output(tmp_path):
    """An absolute /vsiidem/ output path in tmp_path/out (dry runs write nothing there)."""
    (tmp_path / "out").mkdir()
    return "/vsiidem/" + str(tmp_path / "out" / "tile.tif")


def pytest_sessionstart(session):
    # Every test runs GDAL through the plugin: without it they would all fail, each its own way.
    from idem_testlib import idem_driver_missing
    missing = idem_driver_missing()
    if missing:
        pytest.exit(missing, returncode=3)


def pytest_sessionfinish(session, exitstatus):
    from idem_testlib import drop_test_databases
    if os.environ.get("IDEM_TEST_PG_DSN"):
        drop_test_databases()


# The share of the suite the test matrix's other Debian releases run (IDEM_TEST_SHARE=smoke,
# Makefile `test-matrix`): every test but those marked `whole_only`, which run in Debian 12's
# `make test` only. A test is marked so when it takes many seconds and what it does through GDAL
# is done there by a quicker test too: of a slow family, one member stays in the share.
SHARE = os.environ.get("IDEM_TEST_SHARE", "whole")


def pytest_collection_modifyitems(config, items):
    if SHARE == "whole":
        return
    if SHARE != "smoke":
        raise pytest.UsageError(f"IDEM_TEST_SHARE={SHARE!r}: use 'whole' (the default) or "
                                "'smoke' (the test matrix's share)")
    skip = pytest.mark.skip(reason="IDEM_TEST_SHARE=smoke: this slow test runs in Debian 12's "
                                   "make test (the whole suite)")
    for item in items:
        if item.get_closest_marker("whole_only"):
            item.add_marker(skip)


def pytest_configure(config):
    config.addinivalue_line("markers", "golden: the golden key corpus (autotest/data)")
    config.addinivalue_line("markers", "whole_only: a slow test left out of the test matrix's "
                                       "share (IDEM_TEST_SHARE=smoke)")
    # The workers the tests start say what each call did (IDEM_VERBOSE, docs/configuration.md):
    # a documented line on stderr, which many tests read ("IDEM: skipped ..."). test_messages.py
    # checks the default, where a skip prints nothing.
    os.environ["IDEM_VERBOSE"] = "YES"
    # test_differential.py appends one line per compared call here; the summary is printed below.
    import tempfile
    results = tempfile.NamedTemporaryFile(prefix="idem-differential-", suffix=".jsonl",
                                          delete=False)
    results.close()
    os.environ["IDEM_DIFFERENTIAL_RESULTS"] = results.name
    config._idem_differential_results = results.name


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    path = getattr(config, "_idem_differential_results", None)
    if not path or not os.path.exists(path):
        return
    with open(path) as f:
        results = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    if not results:
        return
    matched = sum(1 for r in results if r["matched"])
    known = sorted(r["case"] for r in results if r["known"])
    unexpected = sorted(r["case"] for r in results if not r["matched"] and not r["known"])
    terminalreporter.write_line(
        f"differential: {len(results)} calls compared directly and through IDEM, {matched} "
        f"matched, {len(known)} known differences (docs/keys.md)"
        + (f", unexpected: {', '.join(unexpected)}" if unexpected else ""))
