# SPDX-License-Identifier: MIT
"""RPC sources warped through IDEM give direct gdalwarp's pixels (docs/internals.md §10).

gdalwarp, writing a new GTiff, GPKG or MEM output itself, warps an RPC source only inside the
source's footprint plus 5 pixels (RPCs evaluated with a DEM find source pixels for ground points
outside the footprint); `--config RESTRICT_OUTPUT_DATASET_UPDATE NO` turns that off. IDEM gets
the warp as a VRT, which records neither, and must still write what the direct call writes. The
DEM of `-to RPC_DEM=` decides pixels, so it is keyed by its content, like a source.

The source is synthetic: a 1000x1000 image whose RPCs put the image line at -latitude + 0.3 x
height (normalised), and a DEM that is flat over the footprint and 4,000 m high beyond it, so
that ground points well outside the footprint map back into the image."""

import os

import numpy as np
import pytest
from osgeo import gdal, osr

from idem_testlib import (assert_translation_rebuilt_after, env_with, file_state,  # noqa: F401
                          read_pixels, run, sqlite_ledger)

gdal.UseExceptions()

WINDOW = ["-t_srs", "EPSG:4326", "-te", "9.9", "44.9", "10.1", "45.1", "-ts", "400", "400"]


def _coefficients(**terms):
    # RPC00B order: 1 L P H LP LH PH L2 P2 H2 PLH L3 LP2 LH2 L2P P3 PH2 L2H P2H H3
    names = ["1", "L", "P", "H"]
    values = [0.0] * 20
    for name, value in terms.items():
        values[names.index(name)] = value
    return " ".join(repr(v) for v in values)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("rpc")
    size = 1000
    ds = gdal.GetDriverByName("GTiff").Create(str(root / "src.tif"), size, size, 1, gdal.GDT_Byte)
    y, x = np.mgrid[0:size, 0:size]
    ds.GetRasterBand(1).WriteArray(((x // 25 + y // 25) % 2 * 150 + 50 + (x * y) % 50)
                                   .astype(np.uint8))
    ds.SetMetadata({
        "LINE_OFF": "500", "SAMP_OFF": "500", "LAT_OFF": "45", "LONG_OFF": "10",
        "HEIGHT_OFF": "0", "LINE_SCALE": "500", "SAMP_SCALE": "500", "LAT_SCALE": "0.05",
        "LONG_SCALE": "0.05", "HEIGHT_SCALE": "1000",
        "LINE_NUM_COEFF": _coefficients(P=-1.0, H=0.3), "LINE_DEN_COEFF": _coefficients(**{"1": 1.0}),
        "SAMP_NUM_COEFF": _coefficients(L=1.0), "SAMP_DEN_COEFF": _coefficients(**{"1": 1.0}),
        "MIN_LONG": "9.95", "MAX_LONG": "10.05", "MIN_LAT": "44.95", "MAX_LAT": "45.05",
    }, "RPC")
    ds = None
    write_dem(root / "dem.tif", wall=4000.0)
    return root


def write_dem(path, wall, ground=0.0):
    cells = 400
    dem = gdal.GetDriverByName("GTiff").Create(str(path), cells, cells, 1, gdal.GDT_Float32)
    dem.SetGeoTransform([9.8, 0.4 / cells, 0, 45.2, 0, -0.4 / cells])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(4326)
    dem.SetProjection(srs.ExportToWkt())
    y = np.mgrid[0:cells, 0:cells][0]
    latitude = 45.2 - (y + 0.5) * 0.4 / cells
    dem.GetRasterBand(1).WriteArray(
        np.where(np.abs(latitude - 45) > 0.065, wall, ground).astype(np.float32))
    dem = None


def gdalwarp(args, output, cwd, env=None, fmt="GTiff"):
    if fmt == "IDEM":
        command = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", *args, "src.tif",
                   "/vsiidem/" + str(output)]
    else:
        command = ["gdalwarp", "-q", "-overwrite", "-of", fmt, *args, "src.tif", str(output)]
    return run(command, env=env, cwd=cwd, check=True)


def differing(a, b):
    return int(np.count_nonzero(read_pixels(a) != read_pixels(b)))


@pytest.mark.parametrize("case", ["et0", "approx", "bilinear", "outside"])
def test_rpc_dem_warp_equals_direct_gdalwarp(scene, tmp_path, sqlite_ledger, case):  # noqa: F811
    args = {
        "et0": ["-et", "0", "-to", "RPC_DEM=dem.tif", *WINDOW],
        "approx": ["-to", "RPC_DEM=dem.tif", *WINDOW],
        "bilinear": ["-et", "0", "-r", "bilinear", "-dstnodata", "7", "-to", "RPC_DEM=dem.tif",
                     *WINDOW],
        # A window the footprint misses: gdalwarp warps nothing.
        "outside": ["-et", "0", "-to", "RPC_DEM=dem.tif", "-t_srs", "EPSG:4326", "-te", "10.3",
                    "44.9", "10.4", "45.0", "-ts", "200", "200"],
    }[case]
    direct = tmp_path / "direct.tif"
    unrestricted = tmp_path / "unrestricted.tif"
    gdalwarp(args, direct, scene)
    gdalwarp(["--config", "RESTRICT_OUTPUT_DATASET_UPDATE", "NO", *args], unrestricted, scene)
    if case != "outside":
        # The case must exercise the restriction: without it, gdalwarp writes other pixels.
        assert differing(direct, unrestricted) > 1000
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"
    gdalwarp(["-co", "FORMAT=GTiff", *args], out, scene, env=env, fmt="IDEM")
    assert differing(out, direct) == 0
    if case == "outside":
        assert not read_pixels(out).any()
    before = file_state(out)
    gdalwarp(["-co", "FORMAT=GTiff", *args], out, scene, env=env, fmt="IDEM")
    assert file_state(out) == before
    assert len(sqlite_ledger.completed()) == 1


def test_rpc_restriction_turned_off_is_honoured_and_keyed(scene, tmp_path, sqlite_ledger):  # noqa: F811
    args = ["-et", "0", "-to", "RPC_DEM=dem.tif", *WINDOW]
    unrestricted = tmp_path / "unrestricted.tif"
    gdalwarp(["--config", "RESTRICT_OUTPUT_DATASET_UPDATE", "NO", *args], unrestricted, scene)
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"
    gdalwarp(["-co", "FORMAT=GTiff", *args], out, scene, env=env, fmt="IDEM")
    assert differing(out, unrestricted) > 1000
    # The option changes the pixels, so it changes the key: rebuilt, not skipped onto.
    gdalwarp(["--config", "RESTRICT_OUTPUT_DATASET_UPDATE", "NO", "-co", "FORMAT=GTiff", *args],
             out, scene, env=env, fmt="IDEM")
    assert differing(out, unrestricted) == 0
    assert len(sqlite_ledger.completed()) == 2


def test_rpc_warp_in_python_equals_direct(scene, tmp_path, sqlite_ledger):  # noqa: F811
    direct = tmp_path / "direct.tif"
    args = ["-et", "0", "-to", "RPC_DEM=dem.tif", *WINDOW]
    gdalwarp(args, direct, scene)
    out = tmp_path / "out.tif"
    code = ("from osgeo import gdal\ngdal.UseExceptions()\n"
            f"gdal.Warp({'/vsiidem/' + str(out)!r}, 'src.tif', format='IDEM', "
            f"creationOptions=['FORMAT=GTiff'], options={args!r})\n")
    run(["/usr/bin/python3", "-c", code], env=env_with(IDEM_LEDGER=sqlite_ledger.dsn),
        cwd=scene, check=True)
    assert differing(out, direct) == 0


def test_changed_dem_is_rebuilt_not_skipped(scene, tmp_path, sqlite_ledger):  # noqa: F811
    # The same command, the same DEM path, another DEM: other pixels, so other work.
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(scene / "src.tif", work / "src.tif")
    write_dem(work / "dem.tif", wall=4000.0)
    args = ["-et", "0", "-to", "RPC_DEM=dem.tif", *WINDOW]
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"
    gdalwarp(["-co", "FORMAT=GTiff", *args], out, work, env=env, fmt="IDEM")
    first = read_pixels(out)
    write_dem(work / "dem.tif", wall=4000.0, ground=300.0)
    direct = tmp_path / "direct.tif"
    gdalwarp(args, direct, work)
    gdalwarp(["-co", "FORMAT=GTiff", *args], out, work, env=env, fmt="IDEM")
    assert len(sqlite_ledger.completed()) == 2
    assert differing(out, direct) == 0
    assert np.count_nonzero(read_pixels(out) != first) > 0


def test_a_vrt_of_a_warp_with_a_changed_dem_is_rebuilt(scene, tmp_path, sqlite_ledger):  # noqa: F811
    # The warp is a VRT file, read through another VRT: its DEM is among the datasets the outer
    # VRT's source identity holds.
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(scene / "src.tif", work / "src.tif")
    write_dem(work / "dem.tif", wall=4000.0)
    gdalwarp(["-et", "0", "-to", f"RPC_DEM={work / 'dem.tif'}", *WINDOW], work / "warped.vrt",
             work, fmt="VRT")
    gdal.BuildVRT(str(work / "outer.vrt"), [str(work / "warped.vrt")]).FlushCache()
    assert_translation_rebuilt_after(lambda: write_dem(work / "dem.tif", wall=4000.0, ground=300.0),
                                     "outer.vrt", tmp_path / "out.tif", sqlite_ledger,
                                     env_with(IDEM_LEDGER=sqlite_ledger.dsn), work)
