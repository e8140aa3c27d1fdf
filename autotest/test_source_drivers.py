# SPDX-License-Identifier: MIT
"""Invariant I5, first part: a source is keyed by what it reads, or refused before any claim
(docs/keys.md, "Drivers the key knows"). A driver's file list is trusted only for drivers known
to read nothing else; the others (MRF, GTI, GDALG, any plugin) are refused, naming the driver and
the way out, unless IDEM_TRUST_DRIVER_FILE_LIST names them.

The attack: every raster driver of the running GDAL that can write a copy of a source writes one;
IDEM either refuses it as a source, or keys every file the driver wrote (each must be in the
dataset's file list, which is what the key covers)."""

import os
import shutil

import pytest
from osgeo import gdal

from idem_testlib import GDAL_IDEM, env_with, gdal_at_least, make_source, run, sqlite_ledger  # noqa: F401

gdal.UseExceptions()

TRUST_OPTION = "IDEM_TRUST_DRIVER_FILE_LIST"


def translate(src, dst):
    return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=GTiff", src, dst]


def assert_refused(proc, driver, out, ledger):
    """Refused before any claim: non-zero exit, the driver and the way out named, nothing left."""
    assert proc.returncode != 0, proc.stderr
    assert f"GDAL's {driver} driver" in proc.stderr, proc.stderr
    assert TRUST_OPTION in proc.stderr and "VRT" in proc.stderr, proc.stderr
    assert not os.path.exists(out)
    assert ledger.rows() == []


def mrf_source(tmp_path):
    if gdal.GetDriverByName("MRF") is None:
        pytest.skip("this GDAL has no MRF driver")
    scene = make_source(tmp_path / "scene.tif", size=64, bands=1)
    gdal.Translate(str(tmp_path / "m.mrf"), scene, format="MRF")
    return str(tmp_path / "m.mrf")


def test_mrf_source_is_refused_before_any_claim(tmp_path, sqlite_ledger):
    """GetFileList() of an MRF gives the .mrf alone, not the index and data files it reads."""
    src = mrf_source(tmp_path)
    assert gdal.Open(src).GetFileList() == [src]
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    assert_refused(run(translate(src, out), env=env), "MRF", out, sqlite_ledger)
    # ... also as a VRT's source, and through `gdal-idem key`.
    vrt = str(tmp_path / "m.vrt")
    gdal.BuildVRT(vrt, [src])
    assert_refused(run(translate(vrt, out), env=env), "MRF", out, sqlite_ledger)
    key = run([GDAL_IDEM, "key", "--", *translate(vrt, out)], env=env)
    assert key.returncode != 0 and "MRF" in key.stderr, key.stderr


def test_trusted_driver_is_keyed_by_its_file_list_at_the_stated_risk(tmp_path, sqlite_ledger):
    src = mrf_source(tmp_path)
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, **{TRUST_OPTION: "GTiff, MRF"})
    run(translate(src, out), env=env, check=True)
    assert len(sqlite_ledger.completed()) == 1
    key = run([GDAL_IDEM, "key", "--json", "--", *translate(src, out)], env=env, check=True)
    assert '"file_list_trusted":"MRF"' in key.stdout.replace(" ", "")
    # A name that is no driver is a usage error naming it.
    bad = run(translate(src, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn,
                                                **{TRUST_OPTION: "NOSUCHDRIVER"}))
    assert bad.returncode != 0 and "NOSUCHDRIVER" in bad.stderr, bad.stderr


@pytest.mark.skipif(gdal.GetDriverByName("GTI") is None, reason="GTI is GDAL 3.9+")
def test_gti_index_is_refused_not_skipped(tmp_path, sqlite_ledger):
    """The issue's case 1: a rerun after a scene the index lists changed was skipped."""
    a = make_source(tmp_path / "a.tif", size=64, bands=1, seed=1)
    b = make_source(tmp_path / "b.tif", size=64, bands=1, origin=(500640.0, 4650000.0), seed=2)
    index = str(tmp_path / "idx.gti.gpkg")
    run(["gdaltindex", "-f", "GPKG", index, a, b], check=True)
    out = str(tmp_path / "out.tif")
    proc = run(translate(index, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert_refused(proc, "GTI", out, sqlite_ledger)


@pytest.mark.skipif(not gdal_at_least("3.11"), reason="GDALG is GDAL 3.11+")
def test_a_gdalg_pipeline_is_keyed_by_what_it_reads(tmp_path, sqlite_ledger):
    """The issue's case 2: a rerun after the pipeline's input changed was skipped. The key holds
    the pipeline's file and the dataset it computes, with the files that one reads."""
    a = make_source(tmp_path / "a.tif", size=64, bands=1)
    pipeline = str(tmp_path / "p.gdalg.json")
    run(["gdal", "raster", "pipeline", f"read {a} ! reproject --dst-crs EPSG:4326 ! write "
         f"{pipeline}"], check=True)
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    cmd = translate(pipeline, "/vsiidem/" + out)
    run(cmd, env=env, check=True)
    inode = os.stat(out).st_ino
    run(cmd, env=env, check=True)
    assert os.stat(out).st_ino == inode and len(sqlite_ledger.completed()) == 1  # skipped
    make_source(a, size=64, bands=1, seed=9)  # the pipeline's input changes
    run(cmd, env=env, check=True)
    assert len(sqlite_ledger.completed()) == 2  # other work: rebuilt
    direct = str(tmp_path / "direct.tif")
    gdal.Translate(direct, pipeline, format="GTiff")
    assert gdal.Open(out).ReadRaster() == gdal.Open(direct).ReadRaster()


def test_derived_subdataset_is_keyed_by_the_dataset_it_computes_from(tmp_path, sqlite_ledger):
    a = make_source(tmp_path / "a.tif", size=64, bands=1)
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    src = f"DERIVED_SUBDATASET:LOGAMPLITUDE:{a}"
    run(translate(src, out), env=env, check=True)
    run(translate(src, out), env=env, check=True)
    assert len(sqlite_ledger.completed()) == 1  # the rerun is skipped
    make_source(a, size=64, bands=1, seed=9)
    run(translate(src, out), env=env, check=True)
    assert len(sqlite_ledger.completed()) == 2  # a changed source is other work
    direct = str(tmp_path / "direct.tif")
    gdal.Translate(direct, src, format="GTiff")
    assert gdal.Open(out).ReadRaster() == gdal.Open(direct).ReadRaster()
    if gdal.GetDriverByName("MRF") is not None:
        gdal.Translate(str(tmp_path / "m.mrf"), a, format="MRF")
        proc = run(translate(f"DERIVED_SUBDATASET:LOGAMPLITUDE:{tmp_path / 'm.mrf'}",
                             str(tmp_path / "o2.tif")), env=env)
        assert proc.returncode != 0 and "GDAL's MRF driver" in proc.stderr, proc.stderr


def writable_raster_drivers():
    names = []
    for i in range(gdal.GetDriverCount()):
        driver = gdal.GetDriver(i)
        meta = driver.GetMetadata() or {}
        if meta.get("DCAP_RASTER") != "YES" or meta.get("DCAP_CREATECOPY") != "YES":
            continue
        if driver.ShortName in ("IDEM", "MEM", "VRT", "DERIVED") or not meta.get("DMD_EXTENSION"):
            continue  # IDEM itself, and datasets without a file of one extension
        names.append(driver.ShortName)
    return names


@pytest.mark.parametrize("driver", writable_raster_drivers())
def test_every_driver_is_refused_or_keyed_by_all_it_wrote(tmp_path, sqlite_ledger, driver):
    scene = make_source(tmp_path / "scene.tif", size=32, bands=1)
    folder = tmp_path / "src"
    folder.mkdir()
    ext = gdal.GetDriverByName(driver).GetMetadataItem("DMD_EXTENSION")
    src = str(folder / f"s.{ext}")
    try:
        with gdal.quiet_errors() if hasattr(gdal, "quiet_errors") else _Quiet():
            gdal.Translate(src, scene, format=driver)
            dataset = gdal.Open(src)
    except RuntimeError:
        pytest.skip(f"{driver} cannot write or read back this source")
    if dataset is None or dataset.GetDriver().ShortName != driver:
        pytest.skip(f"{driver}'s copy opens with another driver")
    listed = {os.path.realpath(f) for f in (dataset.GetFileList() or [])}
    dataset = None
    written = {os.path.realpath(os.path.join(folder, f)) for f in os.listdir(folder)}
    out = str(tmp_path / "out.tif")
    proc = run(translate(src, out), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    if proc.returncode != 0:
        assert_refused(proc, driver, out, sqlite_ledger)
        return
    # Accepted: the key covers the file list, which must hold every file the driver wrote (an
    # .aux.xml of statistics alone is derived from the pixels, docs/keys.md).
    unlisted = {f for f in written - listed if not f.endswith(".aux.xml")}
    assert not unlisted, f"{driver} reads files its file list omits: {sorted(unlisted)}"
    shutil.rmtree(folder)


class _Quiet:
    def __enter__(self):
        gdal.PushErrorHandler("CPLQuietErrorHandler")

    def __exit__(self, *exc):
        gdal.PopErrorHandler()



def cutline_in(tmp_path, name, east):
    geojson = tmp_path / f"{name}.geojson"
    geojson.write_text('{"type":"FeatureCollection","crs":{"type":"name","properties":{"name":'
                       '"urn:ogc:def:crs:EPSG::32633"}},"features":[{"type":"Feature",'
                       '"properties":{},"geometry":{"type":"Polygon","coordinates":[[[500100,'
                       f'4649900],[{east},4649900],[{east},4649500],[500100,4649500],'
                       '[500100,4649900]]]}}]}')
    return geojson


def test_a_warp_keys_the_cutline_it_reads_whatever_its_driver(tmp_path, sqlite_ledger):
    """gdalwarp reads its -cutline before the driver sees the work: the key holds the geometry
    the warp cuts with (the warp options' Cutline), so GML, whose file list leaves out the .gfs
    it reads, needs no refusal there; a changed geometry is other work."""
    scene = make_source(tmp_path / "scene.tif", size=64, bands=1)
    gml = str(tmp_path / "cut.gml")
    run(["ogr2ogr", "-f", "GML", gml, str(cutline_in(tmp_path, "a", 500500))], check=True)
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    warp = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=GTiff", "-cutline", gml, scene, out]
    run(warp, env=env, check=True)
    run(warp, env=env, check=True)
    assert len(sqlite_ledger.completed()) == 1
    for name in os.listdir(tmp_path):
        if name.startswith("cut."):
            os.remove(tmp_path / name)
    run(["ogr2ogr", "-f", "GML", gml, str(cutline_in(tmp_path, "b", 500300))], check=True)
    run(warp, env=env, check=True)
    assert len(sqlite_ledger.completed()) == 2
