# SPDX-License-Identifier: MIT
"""Sources without files, as Python pipelines hand them over (docs/keys.md, "Sources in memory"):
a MEM dataset, or a VRT made in memory, warped or translated through IDEM directly or through
the VRT gdal_translate and gdalwarp build around it. Each call gives the direct call's pixels and
georeferencing, an identical rerun is skipped, and a change of what the dataset holds (pixels,
georeferencing, nodata, metadata, mask) is other work: rebuilt, never skipped onto."""

import json

import pytest

from idem_testlib import env_with, run, sqlite_ledger  # noqa: F401

PRELUDE = """
import json, sys
import numpy as np
from osgeo import gdal, osr
gdal.UseExceptions()

def mem_source(name=''):
    ds = gdal.GetDriverByName('MEM').Create(name, 64, 64, 1, gdal.GDT_Byte)
    ds.SetGeoTransform([500000, 10, 0, 4650000, 0, -10])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    ds.GetRasterBand(1).WriteArray((np.arange(64 * 64).reshape(64, 64) % 251).astype('uint8'))
    return ds

def summary(ds):
    band = ds.GetRasterBand(1)
    return {'size': [ds.RasterXSize, ds.RasterYSize], 'geotransform': list(ds.GetGeoTransform()),
            'nodata': band.GetNoDataValue(), 'metadata': ds.GetMetadata(),
            'pixels': band.ReadAsArray().tolist()}

def idem_and_direct(call, src, out, **kwargs):
    ds = call('/vsiidem/' + out, src, format='IDEM', **kwargs)
    ds = None
    opened = gdal.Open(out)
    idem = summary(opened)
    opened = None
    direct_ds = call(out + '.direct.tif', src, format='GTiff', **kwargs)
    direct_ds = None
    opened = gdal.Open(out + '.direct.tif')
    direct = summary(opened)
    opened = None
    return idem, direct

OUT = sys.argv[1]
results = []
"""

CALLS = {
    "warp": "gdal.Warp, src, dstSRS='EPSG:3857'",
    "translate": "gdal.Translate, src",
    "translate-scale": "gdal.Translate, src, scaleParams=[[0, 250, 0, 100]]",
    "translate-average": "gdal.Translate, src, resampleAlg='average', xRes=20, yRes=20",
    "translate-coord-epoch": "gdal.Translate, src, outputSRS='EPSG:32633', "
                             "options=['-a_coord_epoch', '2021.5']",
}

SOURCES = {
    "mem": "src = mem_source()",
    "named-mem": "src = mem_source('tile-source')",
    "buildvrt-of-file": "m = mem_source(); f = gdal.Translate(OUT + '.src.tif', m); f = None; "
                        "src = gdal.BuildVRT('', [OUT + '.src.tif'])",
    "warped-vrt": "m = mem_source(); f = gdal.Translate(OUT + '.src.tif', m); f = None; "
                  "src = gdal.Warp('', OUT + '.src.tif', format='VRT', dstSRS='EPSG:4326')",
}


def run_script(body, out, ledger):
    proc = run(["/usr/bin/python3", "-c", PRELUDE + body + "\nprint(json.dumps(results))\n", out],
               env=env_with(IDEM_LEDGER=ledger.dsn))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("call", list(CALLS))
def test_in_memory_source_gives_the_direct_result_and_skips_on_rerun(sqlite_ledger, tmp_path,  # noqa: F811
                                                                     source, call):
    if source == "warped-vrt" and call != "warp":
        pytest.skip("a warped VRT is warped again, not translated, in this test")
    out = str(tmp_path / "out.tif")
    body = f"""
{SOURCES[source]}
for attempt in range(2):
    idem, direct = idem_and_direct({CALLS[call]}, out=OUT)
    results.append([idem == direct, idem['geotransform'], idem['size']])
"""
    results, _ = run_script(body, out, sqlite_ledger)
    assert [r[0] for r in results] == [True, True], results
    assert len(sqlite_ledger.completed()) == 1  # the second call was skipped


CHANGES = {
    "pixels": "src.GetRasterBand(1).Fill(77)",
    "georeferencing": "src.SetGeoTransform([600000, 10, 0, 4650000, 0, -10])",
    "nodata": "src.GetRasterBand(1).SetNoDataValue(7)",
    "metadata": "src.SetMetadataItem('ACQUIRED', '2026-12-02')",
    "mask": "src.CreateMaskBand(gdal.GMF_PER_DATASET); "
            "src.GetRasterBand(1).GetMaskBand().WriteArray(np.zeros((64, 64), dtype='uint8'))",
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("call", ["translate", "warp"])
def test_changed_in_memory_source_is_rebuilt_not_skipped_onto(sqlite_ledger, tmp_path,  # noqa: F811
                                                              change, call):
    out = str(tmp_path / "out.tif")
    body = f"""
src = mem_source()
idem, direct = idem_and_direct({CALLS[call]}, out=OUT)
results.append(idem == direct)
{CHANGES[change]}
idem, direct = idem_and_direct({CALLS[call]}, out=OUT)
results.append(idem == direct)
"""
    results, _ = run_script(body, out, sqlite_ledger)
    assert results == [True, True]
    assert len(sqlite_ledger.completed()) == 2  # other work: rebuilt


@pytest.mark.parametrize("call", ["translate", "warp"])
def test_two_unnamed_in_memory_sources_in_one_vrt_are_told_apart(sqlite_ledger, tmp_path,  # noqa: F811
                                                                 call):
    """gdal.BuildVRT('', [a, b]) of two MEM datasets both named '': each is identified through
    the VRT's own handle on it, not by the name they share. The direct call's pixels; an
    identical rerun skips; swapping what the two hold (the same two contents, each where the
    other was) gives other pixels, so it is other work, as is a change of either."""
    out = str(tmp_path / "out.tif")
    body = f"""
a = mem_source()
b = mem_source()
b.SetGeoTransform([500640, 10, 0, 4650000, 0, -10])
b.GetRasterBand(1).Fill(40)
def once():
    src = gdal.BuildVRT('', [a, b])
    idem, direct = idem_and_direct({CALLS[call]}, out=OUT)
    results.append([idem == direct, idem['pixels'][0][0], idem['pixels'][0][-1]])
once()
once()                                   # the same: skipped
pixels_a = a.GetRasterBand(1).ReadAsArray()
a.GetRasterBand(1).WriteArray(b.GetRasterBand(1).ReadAsArray())
b.GetRasterBand(1).WriteArray(pixels_a)  # swapped: other work
once()
b.GetRasterBand(1).Fill(41)              # changed: other work
once()
"""
    results, _ = run_script(body, out, sqlite_ledger)
    assert [r[0] for r in results] == [True] * 4
    assert results[0] == results[1] and results[2] != results[0]
    completed = sqlite_ledger.completed()
    assert len(completed) == 3, [r["work_key"] for r in completed]
    assert len({r["work_key"] for r in completed}) == 3


@pytest.mark.parametrize("name", ["level-two", ""], ids=["named", "unnamed"])
def test_mem_source_under_a_vrt_made_in_memory_wrapped_again(sqlite_ledger, tmp_path,  # noqa: F811
                                                              name):
    """gdal_translate's VRT (-scale) over gdal.BuildVRT('', [MEM]): the MEM dataset two levels
    down is reached through the handles, so a change of its pixels is other work. Unnamed, the
    VRT and the MEM dataset share the name '', and the MEM dataset is told apart through the
    VRT's handle on it. The direct call's pixels, a skip on rerun, other work when its pixels
    change."""
    out = str(tmp_path / "out.tif")
    body = f"""
mem = mem_source({name!r})
for fill in (None, None, 200):
    if fill is not None:
        mem.GetRasterBand(1).Fill(fill)
    src = gdal.BuildVRT('', [mem])
    idem, direct = idem_and_direct(gdal.Translate, src, OUT, scaleParams=[[0, 250, 0, 100]])
    results.append(idem == direct)
"""
    results, _ = run_script(body, out, sqlite_ledger)
    assert results == [True, True, True]
    assert len(sqlite_ledger.completed()) == 2


def test_two_unnamed_vrts_made_in_memory_are_refused_not_guessed(sqlite_ledger, tmp_path):  # noqa: F811
    out = str(tmp_path / "out.tif")
    body = """
a = mem_source('a')
b = mem_source('b')
b.SetGeoTransform([500640, 10, 0, 4650000, 0, -10])
src = gdal.BuildVRT('', [gdal.BuildVRT('', [a]), gdal.BuildVRT('', [b])])
try:
    gdal.Translate('/vsiidem/' + OUT, src, format='IDEM', scaleParams=[[0, 250, 0, 100]])
    results.append('published')
except RuntimeError as error:
    results.append(str(error))
"""
    results, _ = run_script(body, out, sqlite_ledger)
    assert "cannot be told apart" in results[0] and "/vsimem/" in results[0]
    assert sqlite_ledger.rows() == []
