# SPDX-License-Identifier: MIT
"""The `gdal` command line of GDAL 3.11 and later (`gdal raster reproject`, `convert`, `pipeline`)
writing through IDEM: a first run writes and completes, a rerun with --overwrite skips (same
inode, bytes and mtime), a rerun without --overwrite is refused by GDAL and leaves the output as it
was, and the pixels are those of the same command with --of GTiff. Skipped on GDALs without it."""

import subprocess

import pytest
from osgeo import gdal

from idem_testlib import (assert_same_pixels, env_with, file_state, gdal_at_least,  # noqa: F401
                          make_source, run, sqlite_ledger, temp_dirs_beside)


def _has_gdal_raster_command():
    if not gdal_at_least("3.11"):
        return False
    try:
        proc = subprocess.run(["gdal", "raster", "--help"], capture_output=True, text=True,
                              timeout=60)
    except FileNotFoundError:
        return False
    return proc.returncode == 0


pytestmark = pytest.mark.skipif(not _has_gdal_raster_command(),
                                reason="the `gdal` command line needs GDAL 3.11 or later")


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=256)


def vsi(path):
    return "/vsiidem/" + str(path)


# Each way of writing a reprojection with the `gdal` program: (IDEM command, direct command).
def _reproject(src, dst, of, *first):
    return ["gdal", "raster", "reproject", *first, "--of", of, "--dst-crs", "EPSG:3857",
            "-r", "bilinear", src, dst]


def _convert(src, dst, of, *first):
    return ["gdal", "raster", "convert", *first, "--of", of, src, dst]


def _pipeline(src, dst, of, *first):
    return ["gdal", "raster", "pipeline", "!", "read", src, "!", "reproject", "--dst-crs",
            "EPSG:3857", "!", "write", *first, "--of", of, dst]


COMMANDS = {"reproject": _reproject, "convert": _convert, "pipeline": _pipeline}


def _idem(command, src, dst, *first):
    return command(src, dst, "IDEM", "--co", "FORMAT=GTiff", *first)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_gdal_command_writes_completes_then_skips(sqlite_ledger, source, tmp_path, name):
    command = COMMANDS[name]
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(_idem(command, source, vsi(out)), env=env, check=True)
    assert temp_dirs_beside(out) == []
    completed = sqlite_ledger.completed()
    assert [r["output_uri"] for r in completed] == [str(out)]
    assert completed[0]["output_size"] == out.stat().st_size

    direct = tmp_path / "direct.tif"
    run(command(source, direct, "GTiff"), check=True)
    assert_same_pixels(out, direct)

    # --overwrite: GDAL deletes the existing output first; IDEM cancels that and skips.
    before = file_state(out)
    run(_idem(command, source, vsi(out), "--overwrite"), env=env, check=True)
    assert file_state(out) == before
    rows = sqlite_ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 1

    # Without --overwrite, GDAL itself refuses an existing output; nothing changes.
    proc = run(_idem(command, source, vsi(out)), env=env)
    assert proc.returncode != 0
    assert file_state(out) == before
    assert len(sqlite_ledger.rows()) == 1


def test_gdal_reproject_changed_option_rebuilds(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(_idem(_reproject, source, vsi(out)), env=env, check=True)
    first_key = sqlite_ledger.completed()[0]["work_key"]
    run(["gdal", "raster", "reproject", "--overwrite", "--of", "IDEM", "--co", "FORMAT=GTiff",
         "--dst-crs", "EPSG:3857", "-r", "nearest", source, vsi(out)], env=env, check=True)
    rows = sqlite_ledger.rows()
    assert len(rows) == 2
    assert rows[0]["work_key"] == first_key and rows[0]["superseded_at"] is not None
    assert rows[1]["work_key"] != first_key and rows[1]["completed_at"] is not None
    direct = tmp_path / "direct.tif"
    run(["gdal", "raster", "reproject", "--of", "GTiff", "--dst-crs", "EPSG:3857", "-r",
         "nearest", source, direct], check=True)
    assert_same_pixels(out, direct)


@pytest.mark.skipif(not gdal_at_least("3.13"),
                    reason="GDAL warns about unknown configuration options from 3.13 on")
def test_idem_configuration_options_are_known_to_gdal_once_the_plugin_is_loaded():
    code = ("from osgeo import gdal\n"
            "gdal.AllRegister()\n"
            "gdal.SetConfigOption('IDEM_LEDGER', 'sqlite:/nonexistent/ledger.sqlite')\n"
            "gdal.SetConfigOption('IDEM_NOT_AN_OPTION', 'x')\n")
    proc = run(["/usr/bin/python3", "-c", code], env=env_with(CPL_DEBUG="ON"), check=True)
    assert "Unknown configuration option 'IDEM_LEDGER'" not in proc.stderr
    assert "Unknown configuration option 'IDEM_NOT_AN_OPTION'" in proc.stderr
