# SPDX-License-Identifier: MIT
"""Differential test: each call of autotest/data/differential_cases.txt is run directly (`-of
FORMAT`) and through IDEM (`-of IDEM -co FORMAT=FORMAT`, output under /vsiidem/), and the two
outputs are compared: raster size, band count and types, geotransform, CRS, GCPs, nodata, colour
interpretation and tables, descriptions, scale and offset, dataset and band metadata, masks and
every pixel. The IDEM call is then run again and must leave its output untouched (a skip).

The session's summary line says how many calls were compared and how many matched; a case
marked `known:` in the data file is a difference listed in docs/keys.md, and fails the day it
stops differing, so that its entry goes too."""

import inspect
import json
import os
import pathlib
import re
import shlex
import subprocess

import numpy as np
import pytest
from osgeo import gdal, osr

from idem_testlib import env_with, gdal_at_least, make_ledger, run

gdal.UseExceptions()

CASES_FILE = pathlib.Path(__file__).resolve().parent / "data" / "differential_cases.txt"
EXTENSIONS = {"GTiff": "tif", "COG": "tif", "PNG": "png", "JPEG": "jpg", "GPKG": "gpkg",
              "netCDF": "nc", "ENVI": "img", "HFA": "img", "Zarr": "zarr", "JP2OpenJPEG": "jp2",
              "MRF": "mrf", "RST": "rst"}
# Where the summary is gathered (conftest.py prints it at the end of the session).
RESULTS = os.environ.get("IDEM_DIFFERENTIAL_RESULTS")


def load_cases():
    cases = []
    for number, line in enumerate(CASES_FILE.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [f.strip() for f in line.split(" | ")]
        if len(fields) not in (4, 5):
            raise ValueError(f"{CASES_FILE.name}:{number}: expected 4 or 5 fields: {line}")
        case_id, program, fmt, arguments = fields[:4]
        notes = fields[4] if len(fields) == 5 else ""
        cases.append(pytest.param(program, fmt, arguments, notes, id=case_id))
    return cases


CASES = load_cases()


def _geo(ds, width, height, origin, epsg=32633, pixel=10.0):
    ds.SetGeoTransform([origin[0], pixel, 0, origin[1], 0, -pixel])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(epsg)
    ds.SetProjection(srs.ExportToWkt())


def _pattern(size, band, seed):
    rng = np.random.default_rng(seed + band)
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    values = (x * (band + 1) / 3.0 + y / (band + 2) + 30 * np.sin((x + y * (band + 1)) / 23.0))
    return values + rng.normal(0, 6, (size, size))


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("differential")
    size = 256
    gtiff = gdal.GetDriverByName("GTiff")
    paths = {}

    def byte_source(name, bands=3, origin=(500000.0, 4650000.0), seed=1, alpha=False):
        ds = gtiff.Create(str(root / name), size, size, bands, gdal.GDT_Byte, ["TILED=YES"])
        _geo(ds, size, size, origin)
        ds.SetMetadataItem("SCENE", name)
        for b in range(bands):
            band = ds.GetRasterBand(b + 1)
            values = np.clip(_pattern(size, b, seed) % 256, 0, 255).astype(np.uint8)
            values[:16, :] = 0
            if alpha and b == bands - 1:
                values = np.full((size, size), 255, np.uint8)
                values[:, :40] = 0
                band.SetColorInterpretation(gdal.GCI_AlphaBand)
            band.WriteArray(values)
            band.SetDescription(f"channel {b + 1}")
            band.SetMetadataItem("WAVELENGTH", str(500 + 100 * b))
        return ds

    byte_source("src.tif").FlushCache()
    paths["src"] = root / "src.tif"
    # src with every band's colour interpretation Undefined (as a MEM dataset's are).
    undefined = gdal.Translate(str(root / "undef.vrt"), str(root / "src.tif"), format="VRT")
    for b in range(1, 4):
        undefined.GetRasterBand(b).SetColorInterpretation(gdal.GCI_Undefined)
    undefined = None
    paths["undef"] = root / "undef.vrt"
    byte_source("src_b.tif", origin=(502560.0, 4650000.0), seed=7).FlushCache()
    paths["src_b"] = root / "src_b.tif"
    # East of src_b, with metadata that conflicts with theirs: a band description, a unit, an
    # item, statistics, and an item of its own.
    ds = byte_source("src_c.tif", origin=(505120.0, 4650000.0), seed=5)
    ds.SetMetadataItem("ONLY_C", "yes")
    ds.GetRasterBand(1).SetDescription("red")
    ds.GetRasterBand(1).SetUnitType("reflectance")
    ds.GetRasterBand(2).SetMetadataItem("WAVELENGTH", "999")
    ds.GetRasterBand(3).SetMetadataItem("STATISTICS_MEAN", "12.5")
    ds = None
    paths["src_c"] = root / "src_c.tif"
    # Across src_c's east edge, off its grid by a fraction of a pixel.
    byte_source("src_d.tif", origin=(507523.0, 4649996.0), seed=3).FlushCache()
    paths["src_d"] = root / "src_d.tif"
    (root / "mosaic.optfile").write_text('# gdalwarp\'s options\n-cvmd "from optfile"\n')
    paths["mosaic_optfile"] = root / "mosaic.optfile"
    gdal.BuildVRT(str(root / "mosaic.vrt"), [str(paths["src"]), str(paths["src_b"])]).FlushCache()
    paths["mosaic"] = root / "mosaic.vrt"
    # A warped VRT of a 256x256 tile of src, written to a file (docs/keys.md, "gdal_translate of a
    # warped VRT").
    gdal.Warp(str(root / "warped.vrt"), str(paths["src"]), format="VRT", dstSRS="EPSG:3857",
              resampleAlg="bilinear", dstAlpha=True, width=256, height=256,
              outputBounds=[1670672.4, 5158073.7, 1674313.8, 5161715.0]).FlushCache()
    paths["warped"] = root / "warped.vrt"
    # UInt16 RGBA whose bands are 15-bit (NBITS=15), read through a VRT (whose bands carry no
    # NBITS, so gdalwarp takes their alpha maximum from the type).
    ds = gtiff.Create(str(root / "nbits.tif"), size, size, 4, gdal.GDT_UInt16,
                      ["NBITS=15", "PHOTOMETRIC=RGB", "ALPHA=YES"])
    _geo(ds, size, size, (500000.0, 4650000.0))
    for b in range(4):
        values = (_pattern(size, b, 31) * 97 % 32768).astype(np.uint16)
        if b == 3:
            values = np.full((size, size), 32767, np.uint16)
            values[:, :40] = 0
            values[:30, :] = 16000
        ds.GetRasterBand(b + 1).WriteArray(values)
    ds = None
    gdal.BuildVRT(str(root / "nbits.vrt"), [str(root / "nbits.tif")]).FlushCache()
    paths["nbits"] = root / "nbits.vrt"
    # The same mosaic whose eastern file is gone (GDAL opens it only to read from it).
    byte_source("gone.tif", origin=(502560.0, 4650000.0), seed=7).FlushCache()
    gdal.BuildVRT(str(root / "partial.vrt"), [str(paths["src"]), str(root / "gone.tif")]).FlushCache()
    os.unlink(root / "gone.tif")
    paths["partial"] = root / "partial.vrt"
    ds = byte_source("rgba.tif", bands=4, alpha=True)
    ds = None
    paths["rgba"] = root / "rgba.tif"
    # Int16, a grey band and an alpha band whose maximum is the type's (32767), part
    # transparent and part half so, read through a VRT (as for {nbits}).
    ds = gtiff.Create(str(root / "int16_alpha.tif"), size, size, 2, gdal.GDT_Int16, ["ALPHA=YES"])
    _geo(ds, size, size, (500000.0, 4650000.0))
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 11) * 37 % 30000).astype(np.int16))
    alpha = np.full((size, size), 32767, np.int16)
    alpha[:, :40] = 0
    alpha[:30, :] = 16000
    ds.GetRasterBand(2).WriteArray(alpha)
    ds = None
    gdal.BuildVRT(str(root / "int16_alpha.vrt"), [str(root / "int16_alpha.tif")]).FlushCache()
    paths["int16_alpha"] = root / "int16_alpha.vrt"

    ds = byte_source("ovr.tif")
    ds.BuildOverviews("AVERAGE", [2, 4])
    ds = None
    paths["ovr"] = root / "ovr.tif"

    ds = byte_source("mask.tif")
    ds.CreateMaskBand(gdal.GMF_PER_DATASET)
    mask = np.full((size, size), 255, np.uint8)
    mask[100:180, 60:200] = 0
    ds.GetRasterBand(1).GetMaskBand().WriteArray(mask)
    ds = None
    paths["mask"] = root / "mask.tif"

    ds = gtiff.Create(str(root / "nodata.tif"), size, size, 1, gdal.GDT_Int16)
    _geo(ds, size, size, (500000.0, 4650000.0))
    values = (_pattern(size, 0, 3) * 10).astype(np.int16)
    values[50:90, 30:120] = -9999
    ds.GetRasterBand(1).WriteArray(values)
    ds.GetRasterBand(1).SetNoDataValue(-9999)
    ds = None
    paths["nodata"] = root / "nodata.tif"

    ds = gtiff.Create(str(root / "float.tif"), size, size, 1, gdal.GDT_Float32)
    _geo(ds, size, size, (500000.0, 4650000.0))
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 5) / 7.0).astype(np.float32))
    ds.GetRasterBand(1).SetScale(2.0)
    ds.GetRasterBand(1).SetOffset(-1.0)
    ds = None
    paths["float"] = root / "float.tif"

    ds = gtiff.Create(str(root / "pal.tif"), size, size, 1, gdal.GDT_Byte)
    _geo(ds, size, size, (500000.0, 4650000.0))
    table = gdal.ColorTable()
    for i in range(256):
        table.SetColorEntry(i, (i, 255 - i, (i * 7) % 256, 255))
    ds.GetRasterBand(1).SetColorTable(table)
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 9) % 256).astype(np.uint8))
    ds = None
    paths["pal"] = root / "pal.tif"

    ds = gtiff.Create(str(root / "gcp.tif"), size, size, 1, gdal.GDT_Byte)
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    gcps = [gdal.GCP(500000 + 10 * px + 0.02 * py * px / 10, 4650000 - 10 * py, 0, px, py)
            for px in (0, 128, 256) for py in (0, 128, 256)]
    ds.SetGCPs(gcps, srs.ExportToWkt())
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 11) % 256).astype(np.uint8))
    ds = None
    paths["gcp"] = root / "gcp.tif"

    # Geolocation arrays (absolute names: the calls run from elsewhere), and a source located
    # by them, without a geotransform.
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    for name, values in (("lon.tif", 15 + x * 0.0002 + y * 0.00004),
                         ("lat.tif", 42 - y * 0.0002 + x * 0.00002)):
        ds = gtiff.Create(str(root / name), size, size, 1, gdal.GDT_Float64)
        ds.GetRasterBand(1).WriteArray(values)
        ds = None
    ds = gtiff.Create(str(root / "geoloc.tif"), size, size, 1, gdal.GDT_Byte)
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 13) % 256).astype(np.uint8))
    wgs84 = osr.SpatialReference()
    wgs84.ImportFromEPSG(4326)
    ds.SetMetadata({"X_DATASET": str(root / "lon.tif"), "X_BAND": "1",
                    "Y_DATASET": str(root / "lat.tif"), "Y_BAND": "1", "PIXEL_OFFSET": "0",
                    "LINE_OFFSET": "0", "PIXEL_STEP": "1", "LINE_STEP": "1",
                    "SRS": wgs84.ExportToWkt()}, "GEOLOCATION")
    ds = None
    paths["geoloc"] = root / "geoloc.tif"

    # RPCs (no geotransform): the line follows latitude, the sample longitude.
    def rpc_terms(**terms):
        names = ["1", "L", "P", "H"]  # the first terms of RPC00B's 20
        return " ".join(repr(terms.get(names[i], 0.0) if i < 4 else 0.0) for i in range(20))

    ds = gtiff.Create(str(root / "rpc.tif"), size, size, 1, gdal.GDT_Byte)
    ds.GetRasterBand(1).WriteArray((_pattern(size, 0, 17) % 256).astype(np.uint8))
    ds.SetMetadata({
        "LINE_OFF": "128", "SAMP_OFF": "128", "LAT_OFF": "45", "LONG_OFF": "10",
        "HEIGHT_OFF": "0", "LINE_SCALE": "128", "SAMP_SCALE": "128", "LAT_SCALE": "0.01",
        "LONG_SCALE": "0.01", "HEIGHT_SCALE": "100",
        "LINE_NUM_COEFF": rpc_terms(P=-1.0), "LINE_DEN_COEFF": rpc_terms(**{"1": 1.0}),
        "SAMP_NUM_COEFF": rpc_terms(L=1.0), "SAMP_DEN_COEFF": rpc_terms(**{"1": 1.0}),
    }, "RPC")
    ds = None
    paths["rpc"] = root / "rpc.tif"

    # Two subdatasets (gdal_translate -sds).
    ds = gdal.GetDriverByName("netCDF").CreateMultiDimensional(str(root / "two.nc"))
    group = ds.GetRootGroup()
    dims = [group.CreateDimension(name, None, None, 64) for name in ("y", "x")]
    for name, seed in (("a", 19), ("b", 23)):
        array = group.CreateMDArray(name, dims, gdal.ExtendedDataType.Create(gdal.GDT_Float32))
        array.Write((_pattern(64, 0, seed)).astype(np.float32))
    ds = None
    paths["sds"] = root / "two.nc"

    cutline = root / "cutline.geojson"
    cutline.write_text(json.dumps({
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32633"}},
        "features": [{"type": "Feature", "properties": {}, "geometry": {
            "type": "Polygon", "coordinates": [[[500300, 4649700], [502000, 4649500],
                                                [501800, 4648000], [500500, 4648200],
                                                [500300, 4649700]]]}}]}))
    paths["cutline"] = cutline
    return {name: str(path) for name, path in paths.items()}


# ---------------------------------------------------------------- running the calls


def substitute(text, sources):
    for name, path in sources.items():
        text = text.replace("{" + name + "}", path)
    return text


def command_line(program, fmt, arguments, sources, output, idem):
    words = shlex.split(substitute(arguments, sources))
    of = ["-of", "IDEM", "-co", f"FORMAT={fmt}"] if idem else ["-of", fmt]
    target = "/vsiidem/" + str(output) if idem else str(output)
    overwrite = ["-overwrite"] if program == "gdalwarp" else []
    return [program, "-q", *overwrite, *of, *words, target]


def python_call(program, fmt, arguments, sources, output, idem):
    kwargs = substitute(arguments, sources)
    target = "/vsiidem/" + str(output) if idem else str(output)
    # The IDEM call's creation options are FORMAT= and then the call's own.
    fmt_args = (f"format='IDEM', creationOptions=['FORMAT={fmt}'] + options" if idem
                else f"format={fmt!r}, creationOptions=options")
    # With `options` a string, the bindings ignore every other keyword argument (format and
    # creation options too): the format goes into the string, as a user has to put it there.
    fmt_words = ["-of", "IDEM", "-co", f"FORMAT={fmt}"] if idem else ["-of", fmt]
    code = ("import shlex\nfrom osgeo import gdal\ngdal.UseExceptions()\n"
            f"kwargs = {kwargs}\n"
            "options = kwargs.pop('creationOptions', [])\n"
            f"source = kwargs.pop('sources', {sources['src']!r})\n"
            # "in_memory": the files as unnamed MEM datasets, under a VRT made in memory.
            "if 'in_memory' in kwargs:\n"
            "    held = [gdal.Translate('', p, format='MEM') for p in kwargs.pop('in_memory')]\n"
            "    source = gdal.BuildVRT('', held)\n"
            "if isinstance(kwargs.get('options'), str):\n"
            f"    kwargs['options'] += ' ' + shlex.join({fmt_words!r})\n"
            f"    gdal.{program}({target!r}, source, **kwargs)\n"
            "else:\n"
            f"    gdal.{program}({target!r}, source, {fmt_args}, **kwargs)\n")
    return ["/usr/bin/python3", "-c", code]


def call(program, fmt, arguments, sources, output, idem, env, cwd):
    build = python_call if program in ("Warp", "Translate") else command_line
    return run(build(program, fmt, arguments, sources, output, idem), env=env, cwd=cwd, check=True)


# ---------------------------------------------------------------- comparing the outputs


def tree_state(path):
    """Inode, mtime and bytes of a file, or of every file under a directory dataset."""
    path = pathlib.Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    siblings = sorted(p for p in path.parent.iterdir()
                      if p != path and p.name.startswith(path.name))  # .aux.xml, .hdr...
    state = []
    for p in files + siblings:
        if p.is_file():
            st = p.stat()
            state.append((str(p), st.st_ino, st.st_mtime_ns, p.read_bytes()))
    return state


def metadata(item, path):
    """The metadata of a dataset or band in every domain (xml: domains as their text), with the
    output's own name (that a format records, ENVI's description) as "<output>"; not
    DERIVED_SUBDATASETS, which GDAL makes up on reading from the file's name."""
    domains = set(item.GetMetadataDomainList() or []) - {"DERIVED_SUBDATASETS"}

    def named(value):
        return value.replace(str(path), "<output>") if isinstance(value, str) else value

    found = {}
    for domain in sorted(domains | {""}):
        values = item.GetMetadata(domain)
        found[domain] = ({k: named(v) for k, v in values.items()} if isinstance(values, dict)
                         else [named(v) for v in values])
    return found


def band_description(band, path):
    table = band.GetColorTable()
    return {
        "type": gdal.GetDataTypeName(band.DataType),
        "nodata": band.GetNoDataValue(),
        "colour": gdal.GetColorInterpretationName(band.GetColorInterpretation()),
        "table": None if table is None else [table.GetColorEntry(i)
                                             for i in range(table.GetCount())],
        "description": band.GetDescription(),
        "scale": band.GetScale(),
        "offset": band.GetOffset(),
        "unit": band.GetUnitType(),
        "metadata": metadata(band, path),
        "mask_flags": band.GetMaskFlags(),
        "overviews": band.GetOverviewCount(),
    }


def differences(actual_path, expected_path):
    """What differs between the two datasets, as a list of short texts (empty: the same)."""
    actual = gdal.Open(str(actual_path))
    expected = gdal.Open(str(expected_path))
    found = []
    shape_a = (actual.RasterXSize, actual.RasterYSize, actual.RasterCount)
    shape_e = (expected.RasterXSize, expected.RasterYSize, expected.RasterCount)
    if shape_a != shape_e:
        return [f"size and bands {shape_a} != {shape_e}"]
    gt_a, gt_e = actual.GetGeoTransform(can_return_null=True), expected.GetGeoTransform(
        can_return_null=True)
    if (gt_a is None) != (gt_e is None) or (
            gt_a is not None and not np.allclose(gt_a, gt_e, rtol=1e-12, atol=0)):
        found.append(f"geotransform {gt_a} != {gt_e}")
    srs_a, srs_e = actual.GetSpatialRef(), expected.GetSpatialRef()
    if (srs_a is None) != (srs_e is None) or (srs_a is not None and not srs_a.IsSame(srs_e)):
        found.append("CRS")
    if actual.GetGCPCount() != expected.GetGCPCount():
        found.append(f"GCP count {actual.GetGCPCount()} != {expected.GetGCPCount()}")
    if metadata(actual, actual_path) != metadata(expected, expected_path):
        found.append(f"metadata {metadata(actual, actual_path)} != "
                     f"{metadata(expected, expected_path)}")
    for i in range(1, actual.RasterCount + 1):
        a, e = actual.GetRasterBand(i), expected.GetRasterBand(i)
        da, de = band_description(a, actual_path), band_description(e, expected_path)
        for name in da:
            if da[name] != de[name]:
                found.append(f"band {i} {name}: {da[name]!r} != {de[name]!r}")
        differ = int(np.count_nonzero(a.ReadAsArray() != e.ReadAsArray()))
        if differ:
            found.append(f"band {i}: {differ} pixels differ")
        if da["mask_flags"] not in (gdal.GMF_ALL_VALID,) and da["mask_flags"] == de["mask_flags"]:
            differ = int(np.count_nonzero(a.GetMaskBand().ReadAsArray()
                                          != e.GetMaskBand().ReadAsArray()))
            if differ:
                found.append(f"band {i} mask: {differ} pixels differ")
    return found


def record(result):
    if RESULTS:
        with open(RESULTS, "a") as f:
            f.write(json.dumps(result) + "\n")


@pytest.mark.parametrize("program, fmt, arguments, notes", CASES)
def test_differential(request, sources, tmp_path, program, fmt, arguments, notes):
    # Notes: "since=3.7", and "known: why", "known from 3.10: why" (seen from that GDAL on) or
    # "known before 3.13: why" (seen on older GDALs only).
    known = False
    for note in (n.strip() for n in notes.split(";")):
        if note.startswith("since=") and not gdal_at_least(note[len("since="):]):
            pytest.skip(f"the option needs GDAL {note[len('since='):]}")
        if note.startswith("known:"):
            known = True
        elif note.startswith("known from "):
            known = gdal_at_least(note[len("known from "):].split(":")[0])
        elif note.startswith("known before "):
            known = not gdal_at_least(note[len("known before "):].split(":")[0])
    if gdal.GetDriverByName(fmt) is None:
        pytest.skip(f"this GDAL has no {fmt} driver")
    case = request.node.callspec.id
    ext = EXTENSIONS[fmt]
    (tmp_path / "direct").mkdir()
    (tmp_path / "idem").mkdir()
    direct = tmp_path / "direct" / f"out.{ext}"
    output = tmp_path / "idem" / f"out.{ext}"
    ledger = make_ledger("sqlite", tmp_path)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    call(program, fmt, arguments, sources, direct, False, env_with(), tmp_path)
    # gdal_translate -sds writes one output per subdataset, out_1.ext, out_2.ext..., and no out.
    names = [direct.name]
    if "-sds" in shlex.split(arguments):
        names = sorted(p.name for p in direct.parent.iterdir() if p.name.startswith("out_"))
        assert len(names) > 1, names
    try:
        call(program, fmt, arguments, sources, output, True, env, tmp_path)
        found = [f"{name}: {difference}" if len(names) > 1 else difference
                 for name in names
                 for difference in differences(output.parent / name, direct.parent / name)]
        if not found:
            before = [tree_state(output.parent / name) for name in names]
            call(program, fmt, arguments, sources, output, True, env, tmp_path)
            if [tree_state(output.parent / name) for name in names] != before:
                found.append("the rerun touched the output instead of skipping")
            elif len(ledger.completed()) != len(names):
                found.append(f"{len(ledger.completed())} completed rows instead of {len(names)}")
    except AssertionError as failure:  # a call that failed: its command and message
        found = [f"a call failed: {failure}"]
    record({"case": case, "matched": not found, "known": known})
    if known:
        assert found, f"known difference no longer seen, remove its marker and its entry in " \
                      f"docs/keys.md: {notes}"
        pytest.xfail(f"{notes}: {'; '.join(found)[:2000]}")
    assert not found, "; ".join(found)


# ---------------------------------------------------------------- what the cases cover

# Options of the documented surface that no case needs to name, and why.
NOT_NAMED = {
    "gdalwarp": {"-of": "every call names the format", "-co": "every IDEM call gives one",
                 "-q": "every call is quiet", "-overwrite": "every gdalwarp call overwrites"},
    "gdal_translate": {"-of": "every call names the format", "-co": "every IDEM call gives one",
                       "-q": "every call is quiet"},
    "Warp": {"format": "every call names the format"},
    "Translate": {"format": "every call names the format"},
}


def documented_options(program):
    """The options the running GDAL's usage text names (`-scale_X` for `-scale_1`...)."""
    usage = subprocess.run([program, "--help"], capture_output=True, text=True, check=False)
    return set(re.findall(r"(?<![\w-])-[A-Za-z][A-Za-z0-9_]*", usage.stdout + usage.stderr))


def cases_of(program):
    return [param.values[2] for param in CASES if param.values[0] == program]


@pytest.mark.parametrize("program", ["gdalwarp", "gdal_translate"])
def test_every_documented_option_has_a_case(program):
    arguments = " ".join(cases_of(program))
    missing = []
    for option in sorted(documented_options(program) - set(NOT_NAMED[program])):
        pattern = re.escape(option).replace("_X", r"_\d+")
        if not re.search(rf"(?<![\w-]){pattern}(?!\w)", arguments):
            missing.append(option)
    assert not missing, f"{program} options without a case in {CASES_FILE.name}: {missing}"


@pytest.mark.parametrize("program, options", [("Warp", gdal.WarpOptions),
                                              ("Translate", gdal.TranslateOptions)])
def test_every_keyword_argument_has_a_case(program, options):
    arguments = " ".join(cases_of(program))
    missing = [name for name in inspect.signature(options).parameters
               if name not in NOT_NAMED[program]
               and not re.search(rf"[\"']{name}[\"']\s*:", arguments)]
    assert not missing, f"gdal.{program} keyword arguments without a case: {missing}"


def test_a_missing_vrt_source_fails_only_where_gdal_reads_it(sources, tmp_path):
    """A VRT whose second file is gone: a window that never reaches it succeeds through IDEM as
    the direct call does, with the same pixels, and skips on its rerun; a window that reads it
    fails through IDEM as the direct call fails, recording nothing (docs/keys.md, "Missing
    sources")."""
    ledger = make_ledger("sqlite", tmp_path)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    direct, output = tmp_path / "direct.tif", tmp_path / "out.tif"
    west = ["-srcwin", "0", "0", "10", "10", sources["partial"]]
    run(["gdal_translate", "-q", *west, direct], check=True)
    run(["gdal_translate", "-q", "-of", "IDEM", *west, f"/vsiidem/{output}"], env=env, check=True)
    assert differences(output, direct) == []
    before = tree_state(output)
    run(["gdal_translate", "-q", "-of", "IDEM", *west, f"/vsiidem/{output}"], env=env, check=True)
    assert tree_state(output) == before
    east = ["-srcwin", "300", "0", "10", "10", sources["partial"]]
    assert run(["gdal_translate", "-q", *east, tmp_path / "direct_east.tif"]).returncode != 0
    proc = run(["gdal_translate", "-q", "-of", "IDEM", *east, f"/vsiidem/{tmp_path}/east.tif"],
               env=env)
    assert proc.returncode != 0
    assert not (tmp_path / "east.tif").exists()
    assert len(ledger.completed()) == 1


MISSING_IN_MEMORY = """
import os, shutil, sys
from osgeo import gdal
gdal.UseExceptions()
src, gone, out = sys.argv[1:4]
shutil.copy(src, gone)
b = gdal.Translate('', gone, format='MEM')
gdal.Translate(gone, b, outputBounds=[502560, 4650000, 505120, 4647440])
vrt = gdal.BuildVRT('', [src, gone])
os.unlink(gone)
for name, window in (('west', [0, 0, 10, 10]), ('west', [0, 0, 10, 10]), ('east', [300, 0, 10, 10])):
    try:
        gdal.Translate(out + name + '.direct.tif', vrt, srcWin=window)
        direct = 'ok'
    except RuntimeError:
        direct = 'failed'
    try:
        gdal.Translate('/vsiidem/' + out + name + '.tif', vrt, srcWin=window, format='IDEM')
        idem = 'ok'
    except RuntimeError:
        idem = 'failed'
    print(name, direct, idem)
"""


def test_a_missing_source_of_a_vrt_made_in_memory_fails_only_where_gdal_reads_it(sources,
                                                                                 tmp_path):
    """The same with the VRT made in memory (gdal.BuildVRT('', [src, gone])): its sources are
    walked by the key's canonical form of the VRT, not by a file's identity, and follow the same
    rule (a stand-in for a file that is gone is a missing source, not a dataset held in memory)."""
    ledger = make_ledger("sqlite", tmp_path)
    out = str(tmp_path / "out_")
    proc = run(["/usr/bin/python3", "-c", MISSING_IN_MEMORY, sources["src"],
                tmp_path / "gone.tif", out], env=env_with(IDEM_LEDGER=ledger.dsn), check=True)
    assert proc.stdout.split("\n")[:3] == ["west ok ok", "west ok ok", "east failed failed"]
    assert differences(out + "west.tif", out + "west.direct.tif") == []
    assert not os.path.exists(out + "east.tif")
    [completed] = ledger.completed()
    assert '"missing"' in completed["work_json"] and "gone.tif" in completed["work_json"]
