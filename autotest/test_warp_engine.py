# SPDX-License-Identifier: MIT
# Pixel identity of idem::materialise() (plugin/warp_engine.cpp) with what gdalwarp and
# gdal_translate write directly (docs/internals.md §8-9): a warped VRT written by `gdalwarp -of VRT`
# (the kind of dataset gdalwarp hands IDEM's CreateCopy in memory) is materialised through
# src/tests/tools/warp_engine_tool and compared, every pixel of every band, with a direct
# `gdalwarp -of GTiff` run with the same options. Also: COG and PNG outputs, non-warped copies of
# gdal_translate VRTs, progress, cancellation.
#
# Run: /usr/bin/python3 -m pytest autotest/test_warp_engine.py
# The tool is looked up in $IDEM_WARP_ENGINE_TOOL, else $IDEM_BUILD_DIR/src/tests/, else build/.
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
from osgeo import gdal, osr

from idem_testlib import gdal_at_least

gdal.UseExceptions()

REPO = pathlib.Path(__file__).resolve().parent.parent
SIZE = 2048  # source raster: SIZE x SIZE x 3 Byte, UTM 33N, 10 m pixels


def _tool():
    explicit = os.environ.get("IDEM_WARP_ENGINE_TOOL")
    if explicit:
        return pathlib.Path(explicit)
    build = pathlib.Path(os.environ.get("IDEM_BUILD_DIR", REPO / "build"))
    return build / "src" / "tests" / "warp_engine_tool"


def run(args, cwd=None, check=True):
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def materialise(source, output, *options, check=True):
    tool = _tool()
    assert tool.exists(), f"{tool} not built (cmake --build the project, or set IDEM_WARP_ENGINE_TOOL)"
    proc = run([tool, *options, source, output], check=check)
    assert "leak" not in proc.stderr, proc.stderr
    return proc


# ---------------------------------------------------------------- fixtures


def _write_source(path, bands=3, overviews=False, palette=False):
    driver = gdal.GetDriverByName("GTiff")
    ds = driver.Create(str(path), SIZE, SIZE, bands, gdal.GDT_Byte, ["TILED=YES"])
    ds.SetGeoTransform([440000, 10, 0, 4650000, 0, -10])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    ds.SetMetadataItem("SCENE", "synthetic")
    if palette:  # before any pixel: libtiff 4.7 refuses a photometric change once writing
        table = gdal.ColorTable()
        for i in range(256):
            table.SetColorEntry(i, (i, 255 - i, (i * 7) % 256, 255))
        ds.GetRasterBand(1).SetColorTable(table)
    rng = np.random.default_rng(42)
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    for b in range(bands):
        gradient = (x * (b + 1) / 7.0 + y / (b + 2) + 40 * np.sin((x + y * (b + 1)) / 97.0)) % 256
        noise = rng.normal(0, 12, (SIZE, SIZE))
        values = np.clip(gradient + noise, 0, 255).astype(np.uint8)
        values[:64, :] = 0  # a strip of zeros, for the nodata cases
        band = ds.GetRasterBand(b + 1)
        band.WriteArray(values)
        band.SetDescription(f"channel {b + 1}")
        band.SetMetadataItem("WAVELENGTH", str(500 + 100 * b))
    if overviews:
        ds.BuildOverviews("AVERAGE", [2, 4])
    ds = None


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("warp_engine")
    _write_source(root / "src.tif")
    _write_source(root / "src_ovr.tif", overviews=True)
    _write_source(root / "src_pal.tif", bands=1, palette=True)
    # A cutline polygon in the source CRS (a skewed quadrilateral inside the scene).
    cutline = {
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32633"}},
        "features": [{
            "type": "Feature", "properties": {},
            "geometry": {"type": "Polygon", "coordinates": [[
                [445000, 4645000], [458000, 4643000], [456000, 4632000],
                [447000, 4634500], [445000, 4645000]]]},
        }],
    }
    (root / "cutline.geojson").write_text(json.dumps(cutline))
    return root


# ---------------------------------------------------------------- comparison


def assert_same_pixels(actual_path, expected_path, overviews=False):
    actual = gdal.Open(str(actual_path))
    expected = gdal.Open(str(expected_path))
    assert (actual.RasterXSize, actual.RasterYSize, actual.RasterCount) == (
        expected.RasterXSize, expected.RasterYSize, expected.RasterCount)
    assert actual.GetGeoTransform() == pytest.approx(expected.GetGeoTransform(), rel=1e-12)
    assert actual.GetSpatialRef().IsSame(expected.GetSpatialRef())
    for i in range(1, actual.RasterCount + 1):
        a = actual.GetRasterBand(i)
        e = expected.GetRasterBand(i)
        assert a.DataType == e.DataType, f"band {i} data type"
        assert a.GetNoDataValue() == e.GetNoDataValue(), f"band {i} nodata"
        assert a.GetColorInterpretation() == e.GetColorInterpretation(), f"band {i} colour"
        assert a.GetDescription() == e.GetDescription(), f"band {i} description"
        if e.GetColorTable() is not None:
            assert a.GetColorTable() is not None, f"band {i} colour table"
            assert a.GetColorTable().GetCount() == e.GetColorTable().GetCount()
        pairs = [(a, e)]
        if overviews:
            assert a.GetOverviewCount() == e.GetOverviewCount(), f"band {i} overview count"
            pairs += [(a.GetOverview(k), e.GetOverview(k)) for k in range(a.GetOverviewCount())]
        for level, (ab, eb) in enumerate(pairs):
            differ = int(np.count_nonzero(ab.ReadAsArray() != eb.ReadAsArray()))
            assert differ == 0, f"band {i} level {level}: {differ} pixels differ"


def warp_vrt(data_dir, tmp_path, args, source="src.tif"):
    # Relative source name, run from the data directory: SourceDataset is then relative too.
    vrt = tmp_path / "warped.vrt"
    run(["gdalwarp", "-q", "-of", "VRT", *args, source, vrt], cwd=data_dir)
    return vrt


def warp_direct(data_dir, tmp_path, args, fmt="GTiff", creation=(), source="src.tif", name="direct.tif"):
    out = tmp_path / name
    co = [x for c in creation for x in ("-co", c)]
    run(["gdalwarp", "-q", "-of", fmt, *co, *args, source, out], cwd=data_dir)
    return out


# ---------------------------------------------------------------- warped sources

T_3857 = ["-t_srs", "EPSG:3857"]
WARP_CASES = {
    "near": T_3857,
    "bilinear": T_3857 + ["-r", "bilinear"],
    "bilinear_et0": T_3857 + ["-r", "bilinear", "-et", "0"],
    "cubic": T_3857 + ["-r", "cubic"],
    "cubic_et0": T_3857 + ["-r", "cubic", "-et", "0"],
    "average": T_3857 + ["-r", "average", "-tr", "35", "35"],
    "mode": T_3857 + ["-r", "mode", "-tr", "25", "25"],
    "lanczos": T_3857 + ["-r", "lanczos"],
    "cubicspline_et0": ["-t_srs", "EPSG:4326", "-r", "cubicspline", "-et", "0"],
    "srcnodata_dstnodata": T_3857 + ["-r", "bilinear", "-srcnodata", "0", "-dstnodata", "255"],
    "dstnodata_per_band": T_3857 + ["-dstnodata", "1 2 3"],
    "dstalpha": T_3857 + ["-r", "bilinear", "-dstalpha"],
    "tr": T_3857 + ["-r", "bilinear", "-tr", "17", "17"],
    "te_ts": T_3857 + ["-r", "cubic", "-te", "1680000", "5150000", "1700000", "5170000",
                       "-ts", "900", "700"],
    "te_srs": ["-t_srs", "EPSG:3857", "-te_srs", "EPSG:4326", "-te", "15.1", "41.8", "15.3", "41.9",
               "-tr", "20", "20", "-r", "bilinear"],
    "tap": T_3857 + ["-tap", "-tr", "30", "30", "-r", "bilinear"],
    "ot_float32": T_3857 + ["-ot", "Float32", "-r", "cubic"],
    "ot_uint16_wt": T_3857 + ["-ot", "UInt16", "-wt", "Float64", "-r", "lanczos"],
    "cutline": T_3857 + ["-cutline", "cutline.geojson", "-r", "bilinear"],
    "cutline_crop": T_3857 + ["-cutline", "cutline.geojson", "-crop_to_cutline", "-dstalpha"],
    "cutline_blend": ["-cutline", "cutline.geojson", "-cblend", "5", "-dstnodata", "0"],
    "wo_sample_grid": T_3857 + ["-r", "bilinear", "-wo", "SAMPLE_GRID=YES", "-wo", "SOURCE_EXTRA=3"],
    "wo_num_threads": T_3857 + ["-r", "cubic", "-wo", "NUM_THREADS=2"],
    "wm_small_chunks": T_3857 + ["-r", "bilinear", "-wm", "4"],
    "same_crs_resample": ["-tr", "13", "13", "-r", "average"],
}


@pytest.mark.parametrize("case", sorted(WARP_CASES))
def test_warp_engine_gtiff_matches_direct_gdalwarp(data_dir, tmp_path, case):
    # The direct call gets the same creation options: from GDAL 3.10 the warp's chunks follow the
    # output's blocks, and with an approximate transformer the chunks decide pixels (a tiled and a
    # striped direct gdalwarp -wm 4 differ there by about 110,000 pixels).
    args = WARP_CASES[case]
    vrt = warp_vrt(data_dir, tmp_path, args)
    out = tmp_path / "idem.tif"
    materialise(vrt, out, "-of", "GTiff", "-co", "TILED=YES")
    assert_same_pixels(out, warp_direct(data_dir, tmp_path, args, creation=["TILED=YES"]))


def test_warp_engine_striped_gtiff_matches_direct_gdalwarp(data_dir, tmp_path):
    # The same small chunks into GDAL's default (striped) layout.
    args = WARP_CASES["wm_small_chunks"]
    vrt = warp_vrt(data_dir, tmp_path, args)
    out = tmp_path / "idem.tif"
    materialise(vrt, out, "-of", "GTiff")
    assert_same_pixels(out, warp_direct(data_dir, tmp_path, args))


def test_warp_engine_source_overview(data_dir, tmp_path):
    # gdalwarp picks a source overview when downsampling; the VRT records it as an open option.
    args = T_3857 + ["-ts", "400", "400", "-r", "average"]
    vrt = warp_vrt(data_dir, tmp_path, args, source="src_ovr.tif")
    assert "OVERVIEW_LEVEL" in vrt.read_text()
    out = tmp_path / "idem.tif"
    materialise(vrt, out)
    assert_same_pixels(out, warp_direct(data_dir, tmp_path, args, source="src_ovr.tif"))


def test_warp_engine_palette_copied(data_dir, tmp_path):
    args = T_3857
    vrt = warp_vrt(data_dir, tmp_path, args, source="src_pal.tif")
    out = tmp_path / "idem.tif"
    materialise(vrt, out)
    direct = warp_direct(data_dir, tmp_path, args, source="src_pal.tif")
    assert_same_pixels(out, direct)
    ds = gdal.Open(str(out))
    table = ds.GetRasterBand(1).GetColorTable()
    assert table.GetColorEntry(10) == (10, 245, 70, 255)


def test_warp_engine_metadata_copied(data_dir, tmp_path):
    vrt = warp_vrt(data_dir, tmp_path, T_3857)
    out = tmp_path / "idem.tif"
    materialise(vrt, out)
    direct = gdal.Open(str(warp_direct(data_dir, tmp_path, T_3857)))
    ds = gdal.Open(str(out))
    assert ds.GetMetadata() == direct.GetMetadata()
    for i in (1, 2, 3):
        assert ds.GetRasterBand(i).GetMetadata() == direct.GetRasterBand(i).GetMetadata()


@pytest.mark.parametrize("case", ["bilinear", "bilinear_et0", "dstalpha"])
def test_warp_engine_cog_matches_direct_warp(data_dir, tmp_path, case):
    # The reference is what gdalwarp's direct mode writes, turned into a COG by the COG driver
    # (what newer gdalwarp does for -of COG). gdalwarp 3.6.2 -of COG itself reads through the
    # warped VRT (docs/internals.md §8) and differs from its own -of GTiff output, so it is not the reference.
    args = WARP_CASES[case]
    creation = ["COMPRESS=DEFLATE", "BLOCKSIZE=256"]
    co = [x for c in creation for x in ("-co", c)]
    vrt = warp_vrt(data_dir, tmp_path, args)
    out = tmp_path / "idem_cog.tif"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    materialise(vrt, out, "-of", "COG", *co, "-scratch", scratch)
    assert list(scratch.iterdir()) == [], "the intermediate GTiff was left behind"
    info = gdal.Info(str(out), format="json")
    assert info["metadata"]["IMAGE_STRUCTURE"].get("LAYOUT") == "COG"
    direct = warp_direct(data_dir, tmp_path, args)
    direct_cog = tmp_path / "direct_cog.tif"
    run(["gdal_translate", "-q", "-of", "COG", *co, direct, direct_cog])
    assert_same_pixels(out, direct)
    assert_same_pixels(out, direct_cog, overviews=True)
    if gdal_at_least("3.13"):
        # GDAL 3.13's gdalwarp -of COG warps once: its output is a reference too.
        gdalwarp_cog = warp_direct(data_dir, tmp_path, args, fmt="COG", creation=creation,
                                   name="gdalwarp_cog.tif")
        assert_same_pixels(out, gdalwarp_cog, overviews=True)


# A 256x256 tile of an XYZ pyramid, where a warp copied from the warped VRT and a warp done first
# give other pixels.
PNG_TILE = T_3857 + ["-r", "bilinear", "-dstalpha", "-te", "1601605", "5148142", "1612061",
                     "5158597", "-ts", "256", "256"]


def test_warp_engine_png_is_copied_from_the_warped_vrt(data_dir, tmp_path):
    # PNG has no Create: GDAL writes a warp into it as PNG's CreateCopy from the warped VRT,
    # block by block (docs/internals.md §14), and so does IDEM: the pixels of gdalwarp -of PNG,
    # which are not those of a warp done first (§8), as gdalwarp -of GTiff does.
    vrt = warp_vrt(data_dir, tmp_path, PNG_TILE)
    out = tmp_path / "idem.png"
    materialise(vrt, out, "-of", "PNG", "-scratch", tmp_path)
    direct_png = warp_direct(data_dir, tmp_path, PNG_TILE, fmt="PNG", name="direct.png")
    assert_same_pixels_ignoring_georef(out, direct_png)
    if gdal.GetDriverByName("PNG").GetMetadataItem(gdal.DCAP_CREATE) is None and \
            not gdal_at_least("3.13"):
        # (A GDAL whose PNG driver had a Create would warp into it directly, and so would IDEM.
        # GDAL 3.13's warper gives this tile the same pixels both ways.)
        warped_first = warp_direct(data_dir, tmp_path, PNG_TILE)
        assert count_differing(out, warped_first) > 0, "the case no longer tells the ways apart"


def count_differing(actual_path, expected_path):
    actual = gdal.Open(str(actual_path)).ReadAsArray()
    expected = gdal.Open(str(expected_path)).ReadAsArray()
    return int(np.count_nonzero(actual != expected))


def assert_same_pixels_ignoring_georef(actual_path, expected_path):
    actual = gdal.Open(str(actual_path))
    expected = gdal.Open(str(expected_path))
    for i in range(1, expected.RasterCount + 1):
        differ = np.count_nonzero(actual.GetRasterBand(i).ReadAsArray()
                                  != expected.GetRasterBand(i).ReadAsArray())
        assert differ == 0, f"band {i}: {differ} pixels differ"


# ---------------------------------------------------------------- non-warped sources

TRANSLATE_CASES = {
    "outsize": ["-outsize", "37%", "41%"],
    "outsize_bilinear": ["-outsize", "1500", "1300", "-r", "bilinear"],
    "bands": ["-b", "3", "-b", "1"],
    "a_nodata": ["-a_nodata", "7"],
    # Exact ratio: a VRT file rounds ScaleRatio to %g, an in-memory one does not.
    "scale_ot": ["-scale", "0", "255", "100", "2650", "-ot", "UInt16"],
    "srcwin": ["-srcwin", "100", "200", "700", "500"],
}


@pytest.mark.parametrize("case", sorted(TRANSLATE_CASES))
def test_warp_engine_translate_vrt_matches_gdal_translate(data_dir, tmp_path, case):
    args = TRANSLATE_CASES[case]
    vrt = tmp_path / "translated.vrt"
    run(["gdal_translate", "-q", "-of", "VRT", *args, "src.tif", vrt], cwd=data_dir)
    out = tmp_path / "idem.tif"
    materialise(vrt, out)
    direct = tmp_path / "direct.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", *args, "src.tif", direct], cwd=data_dir)
    assert_same_pixels(out, direct)


def test_warp_engine_plain_source_copied(data_dir, tmp_path):
    out = tmp_path / "idem_cog.tif"
    materialise(data_dir / "src.tif", out, "-of", "COG", "-co", "COMPRESS=LZW")
    direct = tmp_path / "direct_cog.tif"
    run(["gdal_translate", "-q", "-of", "COG", "-co", "COMPRESS=LZW", data_dir / "src.tif", direct])
    assert_same_pixels(out, direct, overviews=True)


# ---------------------------------------------------------------- progress and cancellation


def _progress(log):
    return [float(line) for line in log.read_text().split()]


@pytest.mark.parametrize("fmt", ["GTiff", "COG", "PNG"])
def test_warp_engine_progress_reaches_one(data_dir, tmp_path, fmt):
    vrt = warp_vrt(data_dir, tmp_path, WARP_CASES["bilinear"])
    log = tmp_path / "progress.txt"
    materialise(vrt, tmp_path / "idem.tif", "-of", fmt, "-progress-log", log, "-scratch", tmp_path)
    values = _progress(log)
    assert values[-1] == 1.0
    assert all(b >= a for a, b in zip(values, values[1:])), "progress went backwards"
    assert any(0.1 < v < 0.9 for v in values), "no intermediate progress"


@pytest.mark.parametrize("fmt,cancel_at", [("GTiff", 0.3), ("COG", 0.2), ("COG", 0.8),
                                           ("PNG", 0.5)])
def test_warp_engine_cancelled_by_progress(data_dir, tmp_path, fmt, cancel_at):
    vrt = warp_vrt(data_dir, tmp_path, WARP_CASES["bilinear"])
    out = tmp_path / "out" / "idem.tif"
    out.parent.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = materialise(vrt, out, "-of", fmt, "-cancel-at", str(cancel_at), "-scratch", scratch,
                       check=False)
    assert proc.returncode == 2, proc.stderr
    assert "cancelled" in proc.stderr
    assert list(out.parent.iterdir()) == [], "a partial output was left behind"
    assert list(scratch.iterdir()) == [], "the intermediate GTiff was left behind"


def test_warp_engine_cancelled_translate(data_dir, tmp_path):
    out = tmp_path / "idem.tif"
    proc = materialise(data_dir / "src.tif", out, "-of", "GTiff", "-cancel-at", "0.5", check=False)
    assert proc.returncode == 2, proc.stderr
    assert not out.exists()


def test_warp_engine_missing_source_is_an_error(data_dir, tmp_path):
    vrt = warp_vrt(data_dir, tmp_path, T_3857)
    text = vrt.read_text()
    assert "src.tif</SourceDataset>" in text
    vrt.write_text(text.replace("src.tif</SourceDataset>", "does_not_exist.tif</SourceDataset>"))
    proc = materialise(vrt, tmp_path / "idem.tif", check=False)
    # The VRT cannot even be opened without its source, or materialise() reports it.
    assert proc.returncode == 1
    assert not (tmp_path / "idem.tif").exists()
