# SPDX-License-Identifier: MIT
"""Outputs whose driver lays out its own grid (docs/keys.md, "Formats that choose their grid"):
MBTiles always, COG and GPKG under TILING_SCHEME. Their size is not the work's, so the skip and
`verify` do not compare it: an identical rerun is skipped and `verify` passes. And a write the
format refuses fails the work as the direct call fails, recording nothing."""

import os

import pytest
from osgeo import gdal

from idem_testlib import GDAL_IDEM, env_with, make_source, run, sqlite_ledger  # noqa: F401

gdal.UseExceptions()

CASES = {
    "MBTiles": ("mbtiles", []),
    "GPKG": ("gpkg", ["TILING_SCHEME=GoogleMapsCompatible"]),
    "COG": ("tif", ["TILING_SCHEME=GoogleMapsCompatible"]),
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_an_output_in_a_grid_of_its_own_is_skipped_on_rerun(tmp_path, sqlite_ledger, fmt):
    ext, options = CASES[fmt]
    src = make_source(tmp_path / "scene.tif", size=256, bands=3)
    out = str(tmp_path / f"out.{ext}")
    cmd = ["gdal_translate", "-q", "-of", "IDEM", "-co", f"FORMAT={fmt}",
           *[w for o in options for w in ("-co", o)], src, "/vsiidem/" + out]
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(cmd, env=env, check=True)
    first = os.stat(out)
    run(cmd, env=env, check=True)
    assert os.stat(out).st_ino == first.st_ino and os.stat(out).st_mtime_ns == first.st_mtime_ns
    assert len(sqlite_ledger.rows()) == 1
    dataset = gdal.Open(out)
    assert (dataset.RasterXSize, dataset.RasterYSize) != (256, 256)  # the driver's grid
    dataset = None
    verify = run([GDAL_IDEM, "verify"], env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    direct = str(tmp_path / f"direct.{ext}")
    gdal.Translate(direct, src, format=fmt, creationOptions=options)
    assert gdal.Open(out).ReadRaster() == gdal.Open(direct).ReadRaster()


def test_a_warp_whose_blocks_the_format_refuses_records_nothing(tmp_path, sqlite_ledger):
    """MBTiles takes only a zoom level's resolution; at another, every block write fails (after a
    failure of its georeferencing the warp had already reported)."""
    src = make_source(tmp_path / "scene.tif", size=256, bands=3)
    direct = run(["gdalwarp", "-q", "-of", "MBTiles", "-t_srs", "EPSG:3857", src,
                  str(tmp_path / "direct.mbtiles")])
    assert direct.returncode != 0
    out = str(tmp_path / "out.mbtiles")
    proc = run(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=MBTiles", "-t_srs",
                "EPSG:3857", src, "/vsiidem/" + out], env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0
    assert not os.path.exists(out)
    assert sqlite_ledger.completed() == []
