# SPDX-License-Identifier: MIT
"""Work that can give other output bytes gets another key (docs/keys.md)."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import cli_key, dry_run_key, gdal_warp_key, rasterio_warp_key, write_raster


def warp(src, dst, *extra):
    return ["-of", "IDEM", "-overwrite", "-t_srs", "EPSG:3857", *extra, src, dst]


def write_cutline(path, x0, y0, x1, y1):
    path.write_text(json.dumps({
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32631"}},
        "features": [{"type": "Feature", "properties": {}, "geometry": {
            "type": "Polygon",
            "coordinates": [[[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]]}}]}))
    return str(path)


@pytest.mark.parametrize("extra", [
    ["-r", "bilinear"],
    ["-r", "cubic"],
    ["-srcnodata", "7"],
    ["-dstnodata", "255"],
    ["-tr", "20", "20"],
    ["-te", "333950", "5093700", "334300", "5094060"],
    ["-ts", "50", "40"],
    ["-ot", "UInt16"],
    ["-et", "0"],
    ["-et", "0.5"],
    ["-tap", "-tr", "10", "10"],
    ["-dstalpha"],
    ["-wo", "SAMPLE_GRID=YES"],          # an option the key knows nothing about goes in
    ["-wt", "Float32"],
    ["-co", "COMPRESS=DEFLATE"],
    ["-co", "FORMAT=COG"],
])
def test_key_differs_for_output_changing_option(key_source, key_output, extra):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert dry_run_key("gdalwarp", warp(key_source, key_output, *extra)) != base


def test_key_differs_for_target_crs(key_source, key_output):
    a = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", key_source, key_output])
    b = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:4326", key_source, key_output])
    c = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs",
                                 "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0.001 +x_0=0 "
                                 "+y_0=0 +k=1 +units=m +nadgrids=@null +wktext +no_defs",
                                 key_source, key_output])
    assert len({a, b, c}) == 3


def test_key_differs_for_creation_option_value(key_source, key_output):
    a = dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "COMPRESS=DEFLATE"))
    b = dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "COMPRESS=LZW"))
    c = dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "COMPRESS=DEFLATE",
                                     "-co", "PREDICTOR=2"))
    assert len({a, b, c}) == 3


def test_key_differs_for_cutline_content_at_the_same_path(tmp_path, key_source, key_output):
    cutline = tmp_path / "cut.geojson"
    write_cutline(cutline, 500050, 4599750, 500300, 4599950)
    a = dry_run_key("gdalwarp", warp(key_source, key_output, "-cutline", str(cutline)))
    write_cutline(cutline, 500060, 4599750, 500300, 4599950)
    b = dry_run_key("gdalwarp", warp(key_source, key_output, "-cutline", str(cutline)))
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert len({a, b, base}) == 3


def test_key_differs_for_one_source_byte_even_with_size_and_mtime_restored(tmp_path, key_source,
                                                                           key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    reference = tmp_path / "reference"
    shutil.copy2(key_source, reference)
    with open(key_source, "r+b") as f:
        f.seek(os.path.getsize(key_source) - 10)  # inside the pixel data
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    subprocess.run(["touch", "-r", str(reference), key_source], check=True)
    assert os.path.getsize(key_source) == os.path.getsize(reference)
    assert os.stat(key_source).st_mtime_ns == os.stat(reference).st_mtime_ns
    assert dry_run_key("gdalwarp", warp(key_source, key_output)) != base


def test_key_differs_for_sidecar_content(key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    subprocess.run(["gdaladdo", "-q", "-ro", key_source, "2"], check=True)  # writes .ovr
    assert os.path.exists(key_source + ".ovr")
    assert dry_run_key("gdalwarp", warp(key_source, key_output)) != base


def test_key_differs_for_source_nodata_metadata(tmp_path, key_output):
    a = write_raster(tmp_path / "a.tif")
    b = write_raster(tmp_path / "b.tif", nodata=0)
    assert (dry_run_key("gdalwarp", warp(a, key_output))
            != dry_run_key("gdalwarp", warp(b, key_output)))


def test_key_differs_for_destination_format_and_namespace(tmp_path, key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    other_output = "/vsiidem/" + str(tmp_path / "out" / "other.tif")
    assert dry_run_key("gdalwarp", warp(key_source, other_output)) != base
    assert dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "FORMAT=PNG")) != base
    assert dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "NAMESPACE=other")) != base
    assert dry_run_key("gdalwarp", warp(key_source, key_output), IDEM_NAMESPACE="other") != base


def test_key_gdal_version_only_when_asked(key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert dry_run_key("gdalwarp", warp(key_source, key_output),
                       IDEM_KEY_GDAL_VERSION="YES") != base
    report = cli_key(["gdalwarp"] + warp(key_source, key_output), as_json=True)
    assert "gdal_version" not in report["work"]


@pytest.mark.parametrize("extra", [
    ["-b", "1"],
    ["-outsize", "20", "15"],
    ["-a_nodata", "0"],
    ["-ot", "UInt16"],
    ["-scale", "0", "255", "0", "100"],
    ["-srcwin", "0", "0", "10", "10"],
    ["-a_srs", "EPSG:32632"],
])
def test_key_translate_differs(tmp_path, key_output, extra):
    src = write_raster(tmp_path / "two.tif", bands=2)
    base = dry_run_key("gdal_translate", ["-of", "IDEM", src, key_output])
    assert dry_run_key("gdal_translate", ["-of", "IDEM", *extra, src, key_output]) != base


def test_key_translate_band_order_differs(tmp_path, key_output):
    src = write_raster(tmp_path / "two.tif", bands=2)
    a = dry_run_key("gdal_translate", ["-of", "IDEM", "-b", "1", "-b", "2", src, key_output])
    b = dry_run_key("gdal_translate", ["-of", "IDEM", "-b", "2", "-b", "1", src, key_output])
    assert a != b


def test_key_rasterio_multiband_nodata_differs_from_plain_gdalwarp(tmp_path, key_output):
    # rasterio always sets UNIFIED_SRC_NODATA=YES; with several bands and source nodata GDAL's
    # warper then masks differently from gdalwarp's default, so the keys must differ, and
    # gdalwarp -wo UNIFIED_SRC_NODATA=YES is the same work as rasterio's.
    src = write_raster(tmp_path / "rgb.tif", bands=3, nodata=0)
    plain = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", src, key_output])
    unified = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-wo",
                                       "UNIFIED_SRC_NODATA=YES", src, key_output])
    from_rasterio = rasterio_warp_key(src, key_output, "EPSG:3857")
    assert plain != from_rasterio
    assert unified == from_rasterio


def test_key_multi_source_warp_is_reported_as_materialised(tmp_path, key_output):
    a = write_raster(tmp_path / "a.tif")
    b = write_raster(tmp_path / "b.tif", origin=(500400.0, 4600000.0), seed=4)
    report = cli_key(["gdalwarp", "-of", "IDEM", "-t_srs", "EPSG:3857", a, b, key_output],
                     as_json=True)
    assert report["work"]["kind"] == "materialised"
    # A pure mosaic (no reprojection) is handed over as a VRT, not materialised.
    mosaic = cli_key(["gdalwarp", "-of", "IDEM", a, b, key_output], as_json=True)
    assert mosaic["work"]["kind"] in ("vrt", "warp")


def test_key_of_a_plain_mosaic_holds_gdalwarps_options(tmp_path, key_output):
    """gdalwarp's plain mosaic is written with the gdalwarp program's own options (nodata,
    metadata...), which the key records, less those that change nothing in the output;
    `gdal-idem key` predicts each. gdal.Warp's arguments cannot be seen: another key."""
    a = write_raster(tmp_path / "a.tif")
    b = write_raster(tmp_path / "b.tif", origin=(500400.0, 4600000.0), seed=4)
    keys = {}
    for name, extra in [("plain", []), ("nomd", ["-nomd"]), ("nodata", ["-dstnodata", "7"]),
                        ("attempt", ["-wm", "64", "-multi", "-q"]), ("empty", ["-cvmd", ""])]:
        args = ["-of", "IDEM", *extra, a, b, key_output]
        keys[name] = dry_run_key("gdalwarp", args)
        assert cli_key(["gdalwarp", *args]) == keys[name], name
    assert keys["attempt"] == keys["plain"]
    assert len({keys["plain"], keys["nomd"], keys["nodata"], keys["empty"]}) == 4
    assert gdal_warp_key([a, b], key_output) not in keys.values()


def test_key_of_a_warp_the_gdalwarp_program_runs_holds_its_options(tmp_path, key_output):
    """A warp into COG with grid options, or with -setci into a format but GeoTIFF, is run with
    the gdalwarp program's own options, which the key records (`gdal-idem key` predicts each);
    several sources warped before IDEM is called are keyed by the sources beside GDAL's
    temporary file. gdal.Warp's arguments cannot be seen: another key."""
    a = write_raster(tmp_path / "a.tif", bands=3)
    b = write_raster(tmp_path / "b.tif", bands=3, origin=(500400.0, 4600000.0), seed=4)
    tiling = ["-co", "FORMAT=COG", "-co", "TILING_SCHEME=GoogleMapsCompatible"]
    keys = {}
    for name, extra, sources in [
            ("cog", [*tiling, "-t_srs", "EPSG:3857"], [a]),
            ("cog_near", [*tiling, "-t_srs", "EPSG:3857", "-r", "near"], [a]),
            ("cog_wm", [*tiling, "-t_srs", "EPSG:3857", "-wm", "64"], [a]),
            ("cog_two", [*tiling, "-t_srs", "EPSG:3857"], [a, b]),
            ("envi", ["-co", "FORMAT=ENVI", "-t_srs", "EPSG:3857"], [a]),
            ("envi_setci", ["-co", "FORMAT=ENVI", "-t_srs", "EPSG:3857", "-setci"], [a])]:
        args = ["-of", "IDEM", *extra, *sources, key_output]
        keys[name] = cli_key(["gdalwarp", *args])
        assert dry_run_key("gdalwarp", args) == keys[name], name
    assert keys["cog_wm"] == keys["cog"]
    assert len({keys[name] for name in keys if name != "cog_wm"}) == 5
    report = cli_key(["gdalwarp", "-of", "IDEM", *tiling, "-t_srs", "EPSG:3857", a, b, key_output],
                     as_json=True)
    assert report["work"]["gdalwarp_warp"] == ["-t_srs", "EPSG:3857"]
    assert len(report["work"]["sources"]) == 2 and "source" not in report["work"]
    assert gdal_warp_key(a, key_output, dstSRS="EPSG:3857",
                         creationOptions=["FORMAT=COG", "TILING_SCHEME=GoogleMapsCompatible"]) \
        != keys["cog"]


@pytest.mark.parametrize("program", ["gdal_translate", "gdalwarp"])
def test_key_of_a_command_with_options_in_capitals_is_the_runs(key_source, key_output, program):
    """GDAL takes options whatever their case; so does `gdal-idem key`, which opens the sources
    with the command's open options and input drivers (-OO, -IF) as the program does."""
    args = ["-OF", "IDEM", "-OO", "NUM_THREADS=2", "-IF", "GTiff", "-CO", "FORMAT=GTiff",
            key_source, key_output]
    if program == "gdalwarp":
        args = ["-T_SRS", "EPSG:3857", "-TR", "30", "30", *args]
    assert cli_key([program, *args]) == dry_run_key(program, args)
    lower = [a.lower() if a.startswith("-") else a for a in args]
    assert cli_key([program, *lower]) == dry_run_key(program, args)


def test_key_differs_for_source_crs_that_really_differs(key_source, key_output):
    """The source file is EPSG:32631. Another zone, a datum shift, another datum: other work."""
    keys = [dry_run_key("gdalwarp", warp(key_source, key_output))]
    for spelling in ["+proj=utm +zone=32 +datum=WGS84 +units=m +no_defs",
                     "+proj=utm +zone=31 +ellps=WGS84 +towgs84=10,20,30 +units=m +no_defs",
                     "+proj=utm +zone=31 +datum=NAD83 +units=m +no_defs",
                     "+proj=utm +zone=31 +ellps=intl +units=m +no_defs"]:
        keys.append(dry_run_key("gdalwarp", warp(key_source, key_output, "-s_srs", spelling)))
    assert len(set(keys)) == len(keys)
