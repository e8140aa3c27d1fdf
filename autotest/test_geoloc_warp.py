# SPDX-License-Identifier: MIT
"""Warps through geolocation arrays (`gdalwarp -geoloc`, `-to SRC_GEOLOC_ARRAY=`) through IDEM.

The arrays say where each source pixel lands on the ground, so they decide the output's pixels
as the source does: the key holds what they contain, not their names (docs/keys.md, "The VRT
tree"). The arrays here are changed only inside the image, so that the output's grid stays the
same and only the key's view of their content can tell the two runs apart."""

import os

import numpy as np
import pytest
from osgeo import gdal, osr

from idem_testlib import (assert_translation_rebuilt_after, env_with, file_state,  # noqa: F401
                          read_pixels, run, sqlite_ledger)

gdal.UseExceptions()

SIZE = 64


def write_arrays(directory, bump=0.0):
    """lon.tif and lat.tif, and the same two as the bands of lonlat.tif; `bump` moves the
    longitudes inside the image only."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    inside = (x > 10) & (x < 50) & (y > 10) & (y < 50)
    lon = 15 + x * 0.001 + y * 0.0002 + bump * inside
    lat = 42 - y * 0.001 + x * 0.0001
    gtiff = gdal.GetDriverByName("GTiff")
    for name, values in (("lon.tif", [lon]), ("lat.tif", [lat]), ("lonlat.tif", [lon, lat])):
        ds = gtiff.Create(str(directory / name), SIZE, SIZE, len(values), gdal.GDT_Float64)
        for band, array in enumerate(values, 1):
            ds.GetRasterBand(band).WriteArray(array)
        ds = None


def write_source(directory, geolocation):
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    ds = gdal.GetDriverByName("GTiff").Create(str(directory / "data.tif"), SIZE, SIZE, 1,
                                              gdal.GDT_Byte)
    ds.GetRasterBand(1).WriteArray(((x * 3 + y * 5) % 256).astype(np.uint8))
    if geolocation is not None:
        srs = osr.SpatialReference()
        srs.ImportFromEPSG(4326)
        ds.SetMetadata({"X_BAND": "1", "Y_BAND": "1", "PIXEL_OFFSET": "0", "LINE_OFFSET": "0",
                        "PIXEL_STEP": "1", "LINE_STEP": "1", "SRS": srs.ExportToWkt(),
                        **geolocation}, "GEOLOCATION")
    ds = None


# How the source names its arrays, and the directory gdalwarp runs from.
CASES = {
    # GDAL opens a relative name as it is, from where the command runs.
    "named_from_cwd": ({"X_DATASET": "lon.tif", "Y_DATASET": "lat.tif"}, [], "scene"),
    # ..., or from the source's directory when the metadata says so.
    "relative_to_source": ({"X_DATASET": "lon.tif", "Y_DATASET": "lat.tif",
                            "X_DATASET_RELATIVE_TO_SOURCE": "YES",
                            "Y_DATASET_RELATIVE_TO_SOURCE": "YES"}, [], "elsewhere"),
    # No geolocation metadata: the arrays are the two bands of a file given to the warp.
    "src_geoloc_array": (None, ["-to", "SRC_GEOLOC_ARRAY=lonlat.tif"], "scene"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_changed_geolocation_arrays_are_rebuilt_not_skipped(tmp_path, sqlite_ledger, case):  # noqa: F811
    geolocation, options, where = CASES[case]
    scene = tmp_path / "scene"
    scene.mkdir()
    (tmp_path / "elsewhere").mkdir()
    cwd = tmp_path / where
    write_arrays(scene)
    write_source(scene, geolocation)
    source = os.path.relpath(scene / "data.tif", cwd)
    args = ["-q", "-overwrite", "-t_srs", "EPSG:4326", *options]
    if geolocation is not None:
        args.append("-geoloc")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"

    def through_idem():
        run(["gdalwarp", *args, "-of", "IDEM", source, "/vsiidem/" + str(out)], env=env,
            cwd=cwd, check=True)

    def direct(name):
        run(["gdalwarp", *args, source, str(tmp_path / name)], cwd=cwd, check=True)
        return read_pixels(tmp_path / name)

    through_idem()
    first = direct("first.tif")
    assert np.array_equal(read_pixels(out), first)

    write_arrays(scene, bump=0.003)
    second = direct("second.tif")
    assert np.count_nonzero(second != first) > 100  # the arrays decide pixels
    through_idem()
    assert len(sqlite_ledger.completed()) == 2
    assert np.array_equal(read_pixels(out), second)

    before = file_state(out)
    through_idem()
    assert file_state(out) == before
    assert len(sqlite_ledger.completed()) == 2


def test_several_sources_into_cog_are_rebuilt_after_their_arrays_changed(tmp_path,
                                                                         sqlite_ledger):  # noqa: F811
    # Several sources into COG with grid options: GDAL warps them into a temporary file first,
    # and IDEM warps them again from the command (docs/internals.md §12). The command names the
    # arrays; the key holds what GDAL's warp of them gave, so changed arrays are other work.
    write_arrays(tmp_path)
    write_source(tmp_path, None)
    gdal.Translate(str(tmp_path / "data2.tif"), str(tmp_path / "data.tif"), scaleParams=[[]])
    args = ["-q", "-overwrite", "-t_srs", "EPSG:3857", "-to", "SRC_GEOLOC_ARRAY=lonlat.tif",
            "-co", "TILING_SCHEME=GoogleMapsCompatible", "data.tif", "data2.tif"]
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"
    cmd = ["gdalwarp", *args[:-2], "-of", "IDEM", "-co", "FORMAT=COG", *args[-2:],
           "/vsiidem/" + str(out)]
    run(cmd, env=env, cwd=tmp_path, check=True)
    run(["gdalwarp", "-of", "COG", *args, "first.tif"], cwd=tmp_path, check=True)
    first = read_pixels(tmp_path / "first.tif")
    assert np.array_equal(read_pixels(out), first)

    write_arrays(tmp_path, bump=0.003)
    run(["gdalwarp", "-of", "COG", *args, "second.tif"], cwd=tmp_path, check=True)
    second = read_pixels(tmp_path / "second.tif")
    assert np.count_nonzero(second != first) > 100
    run(cmd, env=env, cwd=tmp_path, check=True)
    assert len(sqlite_ledger.completed()) == 2
    assert np.array_equal(read_pixels(out), second)


def test_a_vrt_of_a_warp_through_changed_arrays_is_rebuilt(tmp_path, sqlite_ledger):  # noqa: F811
    # The warp is a VRT file, read through another VRT: the arrays its transformer reads are
    # among the datasets the outer VRT's source identity holds.
    write_arrays(tmp_path)
    write_source(tmp_path, {"X_DATASET": "lon.tif", "Y_DATASET": "lat.tif",
                            "X_DATASET_RELATIVE_TO_SOURCE": "YES",
                            "Y_DATASET_RELATIVE_TO_SOURCE": "YES"})
    run(["gdalwarp", "-q", "-geoloc", "-t_srs", "EPSG:4326", "-of", "VRT", "data.tif",
         "warped.vrt"], cwd=tmp_path, check=True)
    gdal.BuildVRT(str(tmp_path / "outer.vrt"), [str(tmp_path / "warped.vrt")]).FlushCache()
    assert_translation_rebuilt_after(lambda: write_arrays(tmp_path, bump=0.003), "outer.vrt",
                                     tmp_path / "out.tif", sqlite_ledger,
                                     env_with(IDEM_LEDGER=sqlite_ledger.dsn), tmp_path)
