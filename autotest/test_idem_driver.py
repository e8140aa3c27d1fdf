# SPDX-License-Identifier: MIT
"""The IDEM driver through the real programs: first run writes and completes, a rerun skips
(same inode, bytes, mtime), a changed option rebuilds and supersedes, a missing or changed output
is redone, every entry point (gdalwarp, gdal_translate, gdal.Warp, gdal.Translate, rasterio)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, INSTALLED, ROOT, assert_same_pixels, env_with, file_state, ledger,  # noqa: F401
                          make_ledger, make_source, read_pixels, run, sqlite_ledger,
                          temp_dirs_beside, warp_reporting)
from idem_testlib import warp_cmd


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif")


def vsi(path):
    return "/vsiidem/" + str(path)  # absolute path -> /vsiidem//abs/path


def test_idem_driver_declares_its_help_topic_and_virtual_io():
    # What `gdalinfo --format IDEM` reports; the topic is a page of the installed documentation.
    code = ("from osgeo import gdal\n"
            "d = gdal.GetDriverByName('IDEM')\n"
            "print(d.GetMetadataItem('DMD_HELPTOPIC'))\n"
            "print(d.GetMetadataItem('DCAP_VIRTUALIO'))\n")
    proc = run(["/usr/bin/python3", "-c", code], check=True)
    topic, virtual_io = proc.stdout.split()
    assert virtual_io == "YES"
    assert topic == "docs/driver.rst"
    assert os.path.isfile(os.path.join(ROOT, topic))
    if INSTALLED:
        assert os.path.isfile(os.path.join("/usr/share/doc/gdal-idem", topic))


def test_idem_translate_stats_of_a_source_without_sidecar(sqlite_ledger, tmp_path):
    # gdal_translate -stats computes the source's statistics; from GDAL 3.10 the source's file
    # list then names the .aux.xml GDAL writes at close, before it exists: IDEM failed with
    # "cannot open source file 'scene.tif.aux.xml'".
    src = make_source(tmp_path / "scene.tif", size=64)
    direct_src = make_source(tmp_path / "direct_scene.tif", size=64)
    assert not os.path.exists(src + ".aux.xml")
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(["gdal_translate", "-q", "-stats", "-of", "IDEM", src, vsi(out)], env=env, check=True)
    direct = tmp_path / "direct.tif"
    run(["gdal_translate", "-q", "-stats", direct_src, direct], check=True)
    assert_same_pixels(out, direct)
    assert len(sqlite_ledger.completed()) == 1


def test_idem_gdalwarp_first_run_writes_output_and_completes(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    proc = run(warp_cmd(source, vsi(out)), env=env_with(IDEM_LEDGER=ledger.dsn), check=True)
    assert out.exists()
    assert temp_dirs_beside(out) == []
    rows = ledger.rows()
    assert len(rows) == 1
    row = rows[0]
    assert row["completed_at"] is not None
    assert row["attempt"] == 1
    assert row["output_uri"] == str(out)
    assert row["output_size"] == out.stat().st_size
    assert row["output_mtime_ns"] == out.stat().st_mtime_ns
    assert "skipped" not in proc.stderr
    # Pixels identical to a direct gdalwarp with the same options.
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert_same_pixels(out, direct)


def test_idem_gdalwarp_rerun_skips_and_leaves_output_untouched(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    run(warp_cmd(source, vsi(out)), env=env, check=True)
    before = file_state(out)
    proc = run(warp_cmd(source, vsi(out)), env=env, check=True)
    assert "IDEM: skipped" in proc.stderr
    assert "already completed" in proc.stderr
    assert file_state(out) == before
    assert temp_dirs_beside(out) == []
    rows = ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 1


def test_idem_changed_option_rebuilds_and_supersedes(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    run(warp_cmd(source, vsi(out)), env=env, check=True)
    first = read_pixels(out)
    proc = run(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-r", "cubic",
                source, vsi(out)], env=env, check=True)
    assert "skipped" not in proc.stderr
    assert not np.array_equal(first, read_pixels(out))
    rows = ledger.rows()
    assert len(rows) == 2
    old, new = rows
    assert old["superseded_at"] is not None
    assert new["completed_at"] is not None and new["superseded_at"] is None
    # Going back to bilinear must rebuild (the old row's output was overwritten), not skip.
    proc = run(warp_cmd(source, vsi(out)), env=env, check=True)
    assert "skipped" not in proc.stderr
    np.testing.assert_array_equal(first, read_pixels(out))


@pytest.mark.parametrize("damage", ["delete", "truncate", "replace"])
def test_idem_missing_or_changed_output_is_redone(sqlite_ledger, source, tmp_path, damage):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(warp_cmd(source, vsi(out)), env=env, check=True)
    good = read_pixels(out)
    if damage == "delete":
        out.unlink()
    elif damage == "truncate":
        with open(out, "r+b") as f:
            f.truncate(out.stat().st_size // 2)
    else:
        make_source(out, size=64)
    proc = run(warp_cmd(source, vsi(out)), env=env, check=True)
    assert "skipped" not in proc.stderr
    assert "rebuilding" in proc.stderr
    np.testing.assert_array_equal(good, read_pixels(out))
    rows = sqlite_ledger.completed()
    assert len(rows) == 1 and rows[0]["output_size"] == out.stat().st_size


def test_idem_plain_output_path_rebuilds_and_says_why(sqlite_ledger, source, tmp_path):
    out = tmp_path / "plain.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(warp_cmd(source, out), env=env, check=True)
    proc = run(warp_cmd(source, out), env=env, check=True)
    assert "/vsiidem/" in proc.stderr and "rebuilt" in proc.stderr
    assert out.exists()
    assert len(sqlite_ledger.completed()) == 1


def test_idem_gdal_translate_first_run_and_skip(ledger, source, tmp_path):
    out = tmp_path / "small.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    cmd = ["gdal_translate", "-of", "IDEM", "-outsize", "50%", "50%", "-co", "COMPRESS=DEFLATE",
           source, vsi(out)]
    run(cmd, env=env, check=True)
    direct = tmp_path / "direct.tif"
    run(["gdal_translate", "-of", "GTiff", "-outsize", "50%", "50%", "-co", "COMPRESS=DEFLATE",
         source, direct], check=True)
    assert_same_pixels(out, direct)
    assert gdal.Info(str(out), format="json")["metadata"]["IMAGE_STRUCTURE"]["COMPRESSION"] == \
        "DEFLATE"
    before = file_state(out)
    proc = run(cmd, env=env, check=True)
    assert "IDEM: skipped" in proc.stderr
    assert file_state(out) == before
    assert len(ledger.completed()) == 1
    # Another creation option: rebuilt, and the first row is superseded.
    changed = [c if c != "COMPRESS=DEFLATE" else "COMPRESS=LZW" for c in cmd]
    proc = run(changed, env=env, check=True)
    assert "skipped" not in proc.stderr
    assert gdal.Info(str(out), format="json")["metadata"]["IMAGE_STRUCTURE"]["COMPRESSION"] == \
        "LZW"
    rows = ledger.rows()
    assert len(rows) == 2 and rows[0]["superseded_at"] is not None


PY_ENTRY = r"""
import sys
from osgeo import gdal
gdal.UseExceptions()
kind, src, dst, variant = sys.argv[1:5]
changed = variant == "changed"
if kind == "warp":
    ds = gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857",
                   resampleAlg="cubic" if changed else "bilinear",
                   creationOptions=["FORMAT=GTiff"])
elif kind == "translate":
    size = 200 if changed else 256
    ds = gdal.Translate(dst, src, format="IDEM", width=size, height=size)
elif kind == "rasterio":
    import logging, rasterio, rasterio.shutil
    from rasterio.vrt import WarpedVRT
    logging.basicConfig()  # rasterio logs GDAL's warnings, the skip notice among them
    from rasterio.enums import Resampling
    resampling = Resampling.cubic if changed else Resampling.bilinear
    with rasterio.open(src) as s, WarpedVRT(s, crs="EPSG:3857", resampling=resampling) as vrt:
        rasterio.shutil.copy(vrt, dst, driver="IDEM", FORMAT="GTiff")
    ds = gdal.Open(dst[len("/vsiidem/"):])
assert ds is not None and ds.RasterCount == 3
ds = None
"""


@pytest.mark.parametrize("kind", ["warp", "translate", "rasterio"])
def test_idem_python_entry_points_write_then_skip(sqlite_ledger, source, tmp_path, kind):
    out = tmp_path / f"{kind}.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    cmd = ["/usr/bin/python3", "-c", PY_ENTRY, kind, source, vsi(out)]
    run(cmd + ["first"], env=env, check=True)
    assert out.exists()
    assert temp_dirs_beside(out) == []
    before = file_state(out)
    proc = run(cmd + ["first"], env=env, check=True)
    assert "IDEM: skipped" in proc.stderr
    assert file_state(out) == before
    rows = sqlite_ledger.rows()
    assert len(rows) == 1 and rows[0]["completed_at"] is not None
    # A changed option rebuilds and supersedes the first row.
    proc = run(cmd + ["changed"], env=env, check=True)
    assert "skipped" not in proc.stderr
    assert file_state(out)[3] != before[3]
    rows = sqlite_ledger.rows()
    assert len(rows) == 2
    assert rows[0]["superseded_at"] is not None
    assert rows[1]["completed_at"] is not None and rows[1]["superseded_at"] is None
    assert temp_dirs_beside(out) == []


def test_idem_progress_passes_through_and_ends_at_one(sqlite_ledger, source, tmp_path):
    gdal.SetConfigOption("IDEM_LEDGER", sqlite_ledger.dsn)
    try:
        seen = []

        def progress(complete, message, data):
            seen.append(complete)
            return 1

        # In-process: the plugin is registered by GDAL from GDAL_DRIVER_PATH (set by make).
        ds = gdal.Warp(vsi(tmp_path / "p.tif"), source, format="IDEM", dstSRS="EPSG:3857",
                       callback=progress)
        assert ds is not None
        ds = None
    finally:
        gdal.SetConfigOption("IDEM_LEDGER", None)
    assert seen and seen[-1] == pytest.approx(1.0)
    assert all(b >= a for a, b in zip(seen, seen[1:]))


def test_idem_cog_output_is_a_cog_with_direct_warp_pixels(sqlite_ledger, source, tmp_path):
    out = tmp_path / "cog.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(warp_cmd(source, vsi(out), "-co", "FORMAT=COG", "-co", "COMPRESS=DEFLATE"), env=env,
        check=True)
    info = gdal.Info(str(out), format="json")
    assert info["metadata"]["IMAGE_STRUCTURE"].get("LAYOUT") == "COG"
    # GDAL 3.6.2's own `gdalwarp -of COG` pulls pixels through the warped VRT
    # (docs/internals.md §8) and so differs from its direct warp; newer GDAL warps into a temporary GTiff first, as
    # IDEM does. The reference is therefore the direct warp.
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert_same_pixels(out, direct)
    assert temp_dirs_beside(out) == []


@pytest.mark.parametrize("fmt", ["GTiff", "COG"])
def test_idem_warp_options_are_read_while_a_postgresql_ledger_answers_the_claim(
        ledger, source, tmp_path, fmt):
    # PostgreSQL: the warp's transformer is built while the server answers the first claim; the
    # warp then uses it, with a direct gdalwarp's pixels. SQLite answers at once: nothing to
    # overlap. A rerun over an existing output (likely a skip) reads nothing ahead; one whose
    # output has gone rebuilds with the options read ahead.
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    ahead = "YES" if ledger.backend == "postgresql" else "NO"
    _, first = warp_reporting(warp_cmd(source, vsi(out), "-co", f"FORMAT={fmt}"), env=env)
    assert first["OUTCOME"] == "WRITTEN"
    assert first["WARP_OPTIONS_READ_AHEAD"] == ahead
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert_same_pixels(out, direct)
    if fmt == "COG":
        info = gdal.Info(str(out), format="json")
        assert info["metadata"]["IMAGE_STRUCTURE"].get("LAYOUT") == "COG"

    rerun_proc, rerun = warp_reporting(warp_cmd(source, vsi(out), "-co", f"FORMAT={fmt}"),
                                       env=env)
    assert "IDEM: skipped" in rerun_proc.stderr
    assert rerun["OUTCOME"] == "SKIPPED"
    assert rerun["WARP_OPTIONS_READ_AHEAD"] == "NO"

    out.unlink()
    rebuilt_proc, rebuilt = warp_reporting(warp_cmd(source, vsi(out), "-co", f"FORMAT={fmt}"),
                                           env=env)
    assert "rebuilding it" in rebuilt_proc.stderr
    assert rebuilt["OUTCOME"] == "WRITTEN"
    assert rebuilt["WARP_OPTIONS_READ_AHEAD"] == ahead
    assert_same_pixels(out, direct)
    rows = ledger.rows()
    assert [(r["attempt"], r["completed_at"] is not None) for r in rows] == [(2, True)]
    assert temp_dirs_beside(out) == []


@pytest.mark.parametrize("et", [None, "0"])
def test_idem_pixels_identical_to_direct_gdalwarp(sqlite_ledger, tmp_path, et):
    src = make_source(tmp_path / "big.tif", size=1024)
    extra = [] if et is None else ["-et", et]
    out = tmp_path / "idem.tif"
    run(warp_cmd(src, vsi(out), *extra), env=env_with(IDEM_LEDGER=sqlite_ledger.dsn), check=True)
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", *extra, src, direct],
        check=True)
    assert_same_pixels(out, direct)


def test_idem_warp_reuses_the_source_the_key_opened(sqlite_ledger, source, tmp_path):
    """The key opens the source once (for its file list); the warp uses that dataset instead of
    opening it a third time (gdalwarp itself opened it first)."""
    out = tmp_path / "idem.tif"
    _, report = warp_reporting(warp_cmd(source, vsi(out)),
                               env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert report["WARP_SOURCE"] == "KEPT"
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert_same_pixels(out, direct)


CUTLINE = ('{"type": "FeatureCollection", "crs": {"type": "name", "properties": {"name": '
           '"urn:ogc:def:crs:EPSG::32633"}}, "features": [{"type": "Feature", "properties": {}, '
           '"geometry": {"type": "Polygon", "coordinates": [[[500800, 4649200], [504500, 4648700], '
           '[503900, 4645600], [501200, 4645900], [500800, 4649200]]]}}]}')
ADOPTION_CASES = {
    "bilinear": ["-t_srs", "EPSG:3857", "-r", "bilinear"],
    "cubic_et0": ["-t_srs", "EPSG:3857", "-r", "cubic", "-et", "0"],
    "geographic_lanczos": ["-t_srs", "EPSG:4326", "-r", "lanczos"],
    "tile_te_ts": ["-t_srs", "EPSG:3857", "-te", "1669792.36", "5635549.22", "1672238.35",
                   "5637995.21", "-ts", "256", "256", "-r", "bilinear"],
    "cutline_crop_dstalpha": ["-t_srs", "EPSG:3857", "-cutline", "CUTLINE", "-crop_to_cutline",
                              "-dstalpha", "-r", "bilinear"],
    "nodata": ["-t_srs", "EPSG:3857", "-srcnodata", "0", "-dstnodata", "255", "-r", "cubic"],
    # The transformer's source CRS is the command's, not the file's.
    "s_srs_override": ["-s_srs", "EPSG:32632", "-t_srs", "EPSG:3857", "-r", "bilinear"],
    "threads": ["-t_srs", "EPSG:3857", "-r", "cubic", "-multi", "-wo", "NUM_THREADS=2"],
    "same_crs": ["-tr", "13", "13", "-r", "average"],
}


@pytest.mark.parametrize("case", sorted(ADOPTION_CASES))
def test_idem_warp_uses_gdalwarps_transformer_with_its_pixels(source, tmp_path, case):
    """The warp runs on the warp operation, options and transformer gdalwarp gave its VRT, not a
    second pair rebuilt from their serialisation: the same pixels as a direct gdalwarp, and the
    same as with IDEM_WARP_REUSE_TRANSFORMER=NO (which rebuilds them), under the same key."""
    cutline = tmp_path / "cutline.geojson"
    cutline.write_text(CUTLINE)
    args = [str(cutline) if a == "CUTLINE" else a for a in ADOPTION_CASES[case]]
    outputs = {}
    for reuse in ("YES", "NO"):
        (tmp_path / reuse).mkdir()
        ledger = make_ledger("sqlite", tmp_path / reuse)
        # One destination (it is in the key), moved aside after each run.
        out = tmp_path / "out.tif"
        _, report = warp_reporting(["gdalwarp", "-of", "IDEM", *args, source, vsi(out)],
                                   env=env_with(IDEM_LEDGER=ledger.dsn,
                                                IDEM_WARP_REUSE_TRANSFORMER=reuse))
        assert report["WARP_OPTIONS"] == ("ADOPTED" if reuse == "YES" else "DESERIALISED")
        assert report["WARP_RUN_BY"] == ("VRT_OPERATION" if reuse == "YES" else "OWN_OPERATION")
        assert report["WARP_SOURCE"] == "KEPT"
        outputs[reuse] = (out.rename(tmp_path / f"reuse_{reuse}.tif"),
                          ledger.completed()[0]["work_key"])
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", *args, source, direct], check=True)
    assert_same_pixels(outputs["YES"][0], direct)
    assert_same_pixels(outputs["NO"][0], direct)
    assert outputs["YES"][1] == outputs["NO"][1]


PY_ADOPTION = r"""
import json, sys
from osgeo import gdal
gdal.UseExceptions()
kind, src, dst = sys.argv[1:4]
if kind == "gdal.Warp":
    gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857", resampleAlg="bilinear")
else:
    import rasterio, rasterio.shutil
    from rasterio.vrt import WarpedVRT
    from rasterio.enums import Resampling
    with rasterio.open(src) as s, WarpedVRT(s, crs="EPSG:3857",
                                            resampling=Resampling.bilinear) as vrt:
        rasterio.shutil.copy(vrt, dst, driver="IDEM")
# rasterio and osgeo.gdal share one libgdal here: the driver's report of this thread's call.
print(json.dumps(gdal.GetDriverByName("IDEM").GetMetadata("_DEBUG_")))
"""


@pytest.mark.parametrize("kind", ["gdal.Warp", "rasterio"])
def test_idem_python_warps_use_their_vrts_transformer(source, tmp_path, kind):
    """gdal.Warp and rasterio's WarpedVRT hand IDEM a VRT built in the process: its transformer
    serves the warp, with the pixels of a rebuilt one."""
    outputs = []
    for reuse in ("YES", "NO"):
        (tmp_path / reuse).mkdir()
        ledger = make_ledger("sqlite", tmp_path / reuse)
        out = tmp_path / f"reuse_{reuse}.tif"
        proc = run(["/usr/bin/python3", "-c", PY_ADOPTION, kind, source, vsi(out)],
                   env=env_with(IDEM_LEDGER=ledger.dsn, IDEM_WARP_REUSE_TRANSFORMER=reuse),
                   check=True)
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert report["OUTCOME"] == "WRITTEN"
        assert report["WARP_OPTIONS"] == ("ADOPTED" if reuse == "YES" else "DESERIALISED")
        assert report["WARP_RUN_BY"] == ("VRT_OPERATION" if reuse == "YES" else "OWN_OPERATION")
        outputs.append(out)
    assert_same_pixels(*outputs)


PY_EDITED_IN_MEMORY = r"""
import sys
import numpy as np
from osgeo import gdal
gdal.UseExceptions()
src, dst = sys.argv[1:3]
ds = gdal.Open(src, gdal.GA_Update)
band = ds.GetRasterBand(1)
band.WriteArray(np.full((band.YSize, band.XSize), 7, np.uint8))  # in GDAL's block cache only
gdal.Warp(dst, ds, format="IDEM", dstSRS="EPSG:3857", resampleAlg="bilinear")
"""


def test_idem_warp_of_a_source_with_unwritten_edits_gives_what_the_handle_shows(
        sqlite_ledger, source, tmp_path):
    """The VRT gdal.Warp builds holds the caller's dataset, open for update, whose edits are
    still in GDAL's block cache. IDEM writes them to the file first, so the key identifies what
    the handle shows and the warp reads it: the output is a direct warp of the edited pixels, as
    plain gdal.Warp gives. The same edits again are the same work: skipped."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(["/usr/bin/python3", "-c", PY_EDITED_IN_MEMORY, source, vsi(out)], env=env, check=True)
    assert int(read_pixels(source)[0].max()) == 7  # the edits are in the file
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", source, direct],
        check=True)
    assert_same_pixels(out, direct)
    assert int(read_pixels(out)[0].max()) == 7
    before = file_state(out)
    run(["/usr/bin/python3", "-c", PY_EDITED_IN_MEMORY, source, vsi(out)], env=env, check=True)
    assert file_state(out) == before
    assert len(sqlite_ledger.completed()) == 1


def test_idem_warp_with_source_open_options_opens_the_source_with_them(sqlite_ledger, tmp_path):
    """-oo reaches the warp: the dataset the key opened (without open options) is not used.
    With -oo OVERVIEW_LEVEL=0 GDAL reads the source's first overview, as a direct gdalwarp does;
    the full-resolution dataset would give other pixels."""
    src = make_source(tmp_path / "scene.tif", size=512)
    run(["gdaladdo", "-q", "-r", "average", src, "2"], check=True)
    extra = ["-oo", "OVERVIEW_LEVEL=0", "-ts", "256", "256"]
    out = tmp_path / "idem.tif"
    _, report = warp_reporting(warp_cmd(src, vsi(out), *extra),
                               env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert report["WARP_SOURCE"] == "OPENED"
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", *extra, src,
         direct], check=True)
    assert_same_pixels(out, direct)
    full = tmp_path / "full.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", "-ts", "256",
         "256", src, full], check=True)
    assert np.count_nonzero(read_pixels(full) != read_pixels(direct)) > 0


def test_idem_translate_of_a_mosaic_does_not_keep_its_sources_open(sqlite_ledger, tmp_path):
    """Identifying a VRT mosaic opens each of its files; only a warp's single source stays open
    for the work, so a mosaic of more files than the process may open at once still works."""
    (tmp_path / "parts").mkdir()
    names = []
    for i in range(300):
        name = tmp_path / "parts" / f"p{i:03d}.tif"
        ds = gdal.GetDriverByName("GTiff").Create(str(name), 8, 8, 1, gdal.GDT_Byte)
        ds.SetGeoTransform([500000 + 80 * (i % 20), 10, 0, 4650000 - 80 * (i // 20), 0, -10])
        ds.GetRasterBand(1).Fill(i % 251)
        ds = None
        names.append(str(name))
    mosaic = tmp_path / "mosaic.vrt"
    gdal.BuildVRT(str(mosaic), names)
    out = tmp_path / "out.tif"
    command = ["gdal_translate", "-q", "-of", "IDEM", str(mosaic), vsi(out)]
    # GDAL itself keeps the mosaic's 300 files open while it reads them (about 310 descriptors);
    # keeping the key's 300 open datasets as well would need over 600.
    proc = subprocess.run(["sh", "-c", 'ulimit -n 450 && exec "$@"', "sh", *command],
                          env=env_with(IDEM_LEDGER=sqlite_ledger.dsn), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    direct = tmp_path / "direct.tif"
    run(["gdal_translate", "-q", str(mosaic), direct], check=True)
    assert_same_pixels(out, direct)


def test_idem_tile_columns_from_option_and_from_grid(sqlite_ledger, source, tmp_path):
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    explicit = tmp_path / "explicit.tif"
    run(warp_cmd(source, vsi(explicit), "-co", "LAYER=ortho", "-co", "TILE=3/4/5"), env=env,
        check=True)
    # A grid that is exactly WebMercatorQuad tile 12/2200/1343.
    z, x, y = 12, 2200, 1343
    half = 20037508.342789244
    span = 2 * half / 2 ** z
    minx, maxy = -half + x * span, half - y * span
    auto = tmp_path / "auto.tif"
    run(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-te", repr(minx),
         repr(maxy - span), repr(minx + span), repr(maxy), "-ts", "256", "256", source,
         vsi(auto)], env=env, check=True)
    rows = {r["output_uri"]: r for r in sqlite_ledger.rows()}
    e = rows[str(explicit)]
    assert (e["layer"], e["tile_z"], e["tile_x"], e["tile_y"]) == ("ortho", 3, 4, 5)
    a = rows[str(auto)]
    assert (a["tile_z"], a["tile_x"], a["tile_y"]) == (z, x, y)


def test_idem_gdalinfo_lists_every_creation_option():
    proc = run(["gdalinfo", "--format", "IDEM"], check=True)
    for name in ("FORMAT", "NAMESPACE", "LAYER", "TILE"):
        assert f"name='{name}'" in proc.stdout or f'name="{name}"' in proc.stdout


def test_idem_unknown_passthrough_option_is_warned_like_gdal(sqlite_ledger, source, tmp_path):
    out = tmp_path / "o.tif"
    proc = run(warp_cmd(source, vsi(out), "-co", "NOT_AN_OPTION=1"),
               env=env_with(IDEM_LEDGER=sqlite_ledger.dsn), check=True)
    assert "NOT_AN_OPTION" in proc.stderr
    assert "does not support" in proc.stderr


def test_idem_multi_source_warp_warns_that_the_claim_came_after_the_work(sqlite_ledger,
                                                                           tmp_path):
    a = make_source(tmp_path / "a.tif", size=128)
    b = make_source(tmp_path / "b.tif", size=128, origin=(501280.0, 4650000.0), seed=2)
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "mosaic.tif"
    proc = run(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", a, b, vsi(out)],
               env=env, check=True)
    assert "claim came after the work" in proc.stderr and "gdalbuildvrt" in proc.stderr
    # The advice works: a VRT of the sources is claimed before the warp, without the warning.
    vrt = tmp_path / "mosaic.vrt"
    run(["gdalbuildvrt", vrt, a, b], check=True)
    out2 = tmp_path / "mosaic2.tif"
    proc = run(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", vrt, vsi(out2)],
               env=env, check=True)
    assert "claim came after the work" not in proc.stderr
    assert len(sqlite_ledger.completed()) == 2


def test_idem_postgis_footprint_splits_at_the_antimeridian(tmp_path):
    import psycopg
    pg = make_ledger("postgresql", tmp_path)
    # UTM zone 60N: x = 833 km at the equator is 180 degrees east.
    src = make_source(tmp_path / "utm60.tif", size=256, epsg=32660, origin=(600000.0, 300000.0),
                      pixel=1200.0)
    out = tmp_path / "across.tif"
    run(["gdalwarp", "-overwrite", "-of", "IDEM", "-te", "700000", "0", "950000", "250000",
         "-tr", "5000", "5000", src, vsi(out)], env=env_with(IDEM_LEDGER=pg.dsn), check=True)
    with psycopg.connect(pg.dsn) as conn:
        parts, valid, west, east = conn.execute(
            "SELECT ST_NumGeometries(footprint), ST_IsValid(footprint), ST_XMin(footprint), "
            "ST_XMax(footprint) FROM idem.ledger").fetchone()
    assert parts == 2 and valid
    assert west == pytest.approx(-180.0, abs=1.0) and east == pytest.approx(180.0, abs=1.0)


def _proj_outline(gt, size, points_per_edge=16):
    """The grid's outline, densified as the driver does, through PROJ (EPSG:3857 to 4326)."""
    from osgeo import osr
    src, dst = osr.SpatialReference(), osr.SpatialReference()
    src.ImportFromEPSG(3857)
    dst.ImportFromEPSG(4326)
    for srs in (src, dst):
        srs.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    transform = osr.CoordinateTransformation(src, dst)
    corners = [(0, 0), (size, 0), (size, size), (0, size), (0, 0)]
    points = []
    for edge in range(4):
        (ax, ay), (bx, by) = corners[edge], corners[edge + 1]
        for i in range(points_per_edge):
            t = i / points_per_edge
            px, py = ax + t * (bx - ax), ay + t * (by - ay)
            points.append(transform.TransformPoint(gt[0] + px * gt[1], gt[3] + py * gt[5])[:2])
    return points


def test_idem_postgis_web_mercator_footprint_is_what_proj_gives(tmp_path):
    """Web Mercator grids get their footprint from the projection's closed formulas (no PROJ
    transformation per tile): an unrotated grid's edges are meridians and parallels, so its
    corners, each PROJ's to 1e-9 degrees, are its outline; a grid past the antimeridian is
    split there, and the whole world stays the whole world."""
    import psycopg
    from osgeo import ogr
    pg = make_ledger("postgresql", tmp_path)
    src = make_source(tmp_path / "geo.tif", size=256, epsg=4326, origin=(-180.0, 85.0),
                      pixel=360.0 / 256)
    env = env_with(IDEM_LEDGER=pg.dsn)
    half = 20037508.342789244
    # Tile 14/8913/6100; a grid from 1 km west of the antimeridian to 4 km east of it; tile 0/0/0.
    grids = {"tile.tif": (1763555.116595585, 5114554.436617713, 1766001.1015007123,
                          5117000.421522839),
             "across.tif": (half - 1000.0, -3000000.0, half + 4000.0, -2995000.0),
             "world.tif": (-half, -half, half, half)}
    for name, (xmin, ymin, xmax, ymax) in grids.items():
        run(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-te",
             repr(xmin), repr(ymin), repr(xmax), repr(ymax), "-ts", "256", "256", src,
             vsi(tmp_path / name)], env=env, check=True)
    with psycopg.connect(pg.dsn) as conn:
        rows = dict(conn.execute(
            "SELECT output_uri, ST_AsText(footprint) FROM idem.ledger").fetchall())

    tile = ogr.CreateGeometryFromWkt(rows[str(tmp_path / "tile.tif")])
    assert tile.GetGeometryCount() == 1
    ring = tile.GetGeometryRef(0).GetGeometryRef(0)
    got = [ring.GetPoint_2D(i) for i in range(ring.GetPointCount() - 1)]
    xmin, ymin, xmax, ymax = grids["tile.tif"]
    gt = (xmin, (xmax - xmin) / 256, 0, ymax, 0, -(ymax - ymin) / 256)
    assert len(got) == 4
    for (lon, lat), (want_lon, want_lat) in zip(got, _proj_outline(gt, 256, 1)):
        assert lon == pytest.approx(want_lon, abs=1e-9)
        assert lat == pytest.approx(want_lat, abs=1e-9)
    # PROJ's densified outline lies on those corners' rectangle.
    west, east, south, north = tile.GetEnvelope()
    for lon, lat in _proj_outline(gt, 256):
        assert min(abs(lon - west), abs(lon - east), abs(lat - south),
                   abs(lat - north)) < 1e-9, (lon, lat)

    across = ogr.CreateGeometryFromWkt(rows[str(tmp_path / "across.tif")])
    assert across.GetGeometryCount() == 2
    west, east = sorted((across.GetGeometryRef(i).GetEnvelope() for i in range(2)))
    assert west[0] == pytest.approx(-180.0, abs=1e-9) and east[1] == pytest.approx(180.0,
                                                                                    abs=1e-9)
    degrees_per_metre = 180 / 3.141592653589793 / 6378137.0
    assert east[0] == pytest.approx(180 - 1000 * degrees_per_metre, abs=1e-9)
    assert west[1] == pytest.approx(-180 + 4000 * degrees_per_metre, abs=1e-9)

    world = ogr.CreateGeometryFromWkt(rows[str(tmp_path / "world.tif")])
    assert world.GetEnvelope() == pytest.approx((-180.0, 180.0, -85.0511287798, 85.0511287798),
                                                abs=1e-9)
    assert world.GetArea() == pytest.approx(360 * 2 * 85.0511287798, rel=1e-9)


# ---------------------------------------------------------------------------------------------
# A PostgreSQL ledger opened ahead: the first use of /vsiidem/ starts the connection, which the
# driver then finishes and uses (docs/operations.md, "PostgreSQL connection costs").

@pytest.mark.parametrize("backend", ["postgresql", "pgbouncer"])
def test_idem_vsiidem_write_uses_the_ledger_connection_opened_ahead(backend, source, tmp_path):
    """A fresh database (no idem schema yet: the schema query sent ahead fails, and opening the
    ledger creates the schema), a first run, a skip; the same with IDEM_LEDGER_PREOPEN=NO."""
    pg = make_ledger(backend, tmp_path)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=pg.dsn)
    _, first = warp_reporting(warp_cmd(source, vsi(out)), env=env)
    assert first["LEDGER_CONNECTIONS"] == "1"
    assert first["LEDGER_CONNECTIONS_OPENED_AHEAD"] == "1"
    plain = tmp_path / "plain.tif"
    run(["gdalwarp", "-q", "-t_srs", "EPSG:3857", "-r", "bilinear", source, plain], check=True)
    assert_same_pixels(out, plain)
    assert [r["attempt"] for r in pg.completed()] == [1]

    _, again = warp_reporting(warp_cmd(source, vsi(out)), env=env)
    assert again["LEDGER_CONNECTIONS_OPENED_AHEAD"] == "1"
    assert again["OUTCOME"] == "SKIPPED"

    _, off = warp_reporting(warp_cmd(source, vsi(tmp_path / "off.tif")),
                            env=dict(env, IDEM_LEDGER_PREOPEN="NO"))
    assert off["LEDGER_CONNECTIONS"] == "1"
    assert off["LEDGER_CONNECTIONS_OPENED_AHEAD"] == "0"
    assert_same_pixels(tmp_path / "off.tif", plain)
    assert len(pg.completed()) == 2


def test_idem_ledger_opened_ahead_reports_a_connection_error_as_before(source, tmp_path):
    """A database that does not exist: the error (from the connection started ahead) is the one
    a connection made by the driver gives, once, without the password; nothing is written."""
    import psycopg
    from idem_testlib import _pg_dsn
    params = psycopg.conninfo.conninfo_to_dict(_pg_dsn())
    params.update(dbname="idem_no_such_database", password="s3cretpw")
    dsn = psycopg.conninfo.make_conninfo(**params)
    messages = {}
    for preopen in ("YES", "NO"):
        out = tmp_path / f"{preopen}.tif"
        proc = run(warp_cmd(source, vsi(out)),
                   env=env_with(IDEM_LEDGER=dsn, IDEM_LEDGER_PREOPEN=preopen))
        assert proc.returncode != 0
        assert "s3cretpw" not in proc.stderr + proc.stdout
        assert not out.exists() and temp_dirs_beside(out) == []
        errors = [line for line in proc.stderr.splitlines()
                  if "cannot connect to the PostgreSQL ledger" in line]
        assert len(errors) == 1, proc.stderr
        assert "idem_no_such_database" in errors[0]
        messages[preopen] = errors[0]
    assert messages["YES"] == messages["NO"]


def _silent_server():
    """A TCP listener on loopback that accepts connections and never answers."""
    import socket
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    return listener


def test_idem_ledger_that_never_answers_holds_no_process_that_does_not_need_it(source, tmp_path):
    """gdalinfo on a /vsiidem/ path starts the connection to the ledger (a /vsiidem/ user may be
    about to write) but ends as soon as its own work is done; a write gives up after the DSN's
    connect_timeout, counted from the start of that connection, with libpq's message; a dry run
    does not connect."""
    listener = _silent_server()
    port = listener.getsockname()[1]
    try:
        dsn = f"host=127.0.0.1 port={port} dbname=idem user=idem password=s3cretpw connect_timeout=3"
        env = env_with(IDEM_LEDGER=dsn)
        listener.settimeout(0)
        # A dry run touches no ledger: not even a connection.
        dry = run(warp_cmd(source, vsi(tmp_path / "dry.tif")), env=dict(env, IDEM_DRY_RUN="YES"),
                  check=True)
        assert "IDEM dry run: key=" in dry.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()

        # With a connect_timeout longer than the test's own limit on a program (300 s), a
        # gdalinfo that waited for the connection would not finish in time.
        patient = dict(env, IDEM_LEDGER=dsn.replace("connect_timeout=3", "connect_timeout=900"))
        info = run(["gdalinfo", vsi(source)], env=patient, check=True)
        assert "Size is 512, 512" in info.stdout
        listener.accept()[0].close()  # the connection was started, and not waited for

        out = tmp_path / "out.tif"
        proc = run(warp_cmd(source, vsi(out)), env=env)
        assert proc.returncode != 0
        assert "timeout expired" in proc.stderr and "s3cretpw" not in proc.stderr
        assert not out.exists()
    finally:
        listener.close()


def test_idem_forked_child_connects_itself_and_leaves_the_parent_its_connection(tmp_path):
    """The parent's connection started ahead belongs to it: a child forked meanwhile that writes
    connects itself (sharing the socket would mix the two conversations), and both complete."""
    pg = make_ledger("postgresql", tmp_path)
    src = make_source(tmp_path / "scene.tif", size=128)
    script = f"""
import os, sys
from osgeo import gdal
gdal.UseExceptions()
gdal.VSIStatL({vsi(tmp_path / "parent.tif")!r})  # starts the ledger's connection
pid = os.fork()
name = "child" if pid == 0 else "parent"
if pid == 0:
    gdal.SetConfigOption("IDEM_LEDGER_PREOPEN", "NO")  # nothing of its own opened ahead
gdal.Warp("/vsiidem/" + {str(tmp_path)!r} + "/" + name + ".tif",
          {src!r}, format="IDEM", dstSRS="EPSG:3857")
idem = gdal.GetDriverByName("IDEM")
# One write(2) of a line shorter than PIPE_BUF: the two processes' lines never interleave (print
# writes its words one by one when Python's output is unbuffered).
os.write(1, " ".join([name, idem.GetMetadataItem("LEDGER_CONNECTIONS", "_DEBUG_"),
                      idem.GetMetadataItem("LEDGER_CONNECTIONS_OPENED_AHEAD", "_DEBUG_")])
         .encode() + b"\\n")
if pid == 0:
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""
    proc = run(["/usr/bin/python3", "-c", script],
               env=env_with(IDEM_LEDGER=pg.dsn))
    assert proc.returncode == 0, proc.stderr
    # (name, connections, of them opened ahead): the parent's, not the child's.
    assert sorted(proc.stdout.split("\n")[:-1]) == ["child 1 0", "parent 1 1"]
    completed = sorted(os.path.basename(r["output_uri"]) for r in pg.completed())
    assert completed == ["child.tif", "parent.tif"]
    assert_same_pixels(tmp_path / "child.tif", tmp_path / "parent.tif")


def test_idem_threads_of_one_process_share_the_ledger_opened_ahead(tmp_path):
    """Four threads of one Python process warp eight tiles through /vsiidem/ at once: their first
    uses race to start the connection, one is started and taken, and every tile completes."""
    pg = make_ledger("pgbouncer", tmp_path)
    src = make_source(tmp_path / "scene.tif", size=256)
    script = f"""
from concurrent.futures import ThreadPoolExecutor
from osgeo import gdal
gdal.UseExceptions()
def tile(i):
    gdal.Warp("/vsiidem/" + {str(tmp_path)!r} + "/t%d.tif" % i, {src!r}, format="IDEM",
              dstSRS="EPSG:3857", width=64 + i, height=64 + i)
    idem = gdal.GetDriverByName("IDEM")
    return (idem.GetMetadataItem("LEDGER_CONNECTIONS", "_DEBUG_"),
            idem.GetMetadataItem("LEDGER_CONNECTIONS_OPENED_AHEAD", "_DEBUG_"))
with ThreadPoolExecutor(4) as pool:
    print(sorted(set(pool.map(tile, range(8)))))
"""
    proc = run(["/usr/bin/python3", "-c", script],
               env=env_with(IDEM_LEDGER=pg.dsn))
    assert proc.returncode == 0, proc.stderr
    # Every call's report of the one ledger: one connection, the one opened ahead.
    assert proc.stdout.strip() == "[('1', '1')]"
    assert sorted(os.path.basename(r["output_uri"]) for r in pg.completed()) == [
        f"t{i}.tif" for i in range(8)]
    for i in range(8):
        plain = tmp_path / f"plain{i}.tif"
        gdal.Warp(str(plain), src, dstSRS="EPSG:3857", width=64 + i, height=64 + i)
        assert_same_pixels(tmp_path / f"t{i}.tif", plain)


MANY_LEDGERS = r"""
import os, sys
from osgeo import gdal
gdal.UseExceptions()
src, tmp, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
def open_files():
    return len(os.listdir("/proc/self/fd"))
counts = []
for i in range(count):
    gdal.SetConfigOption("IDEM_LEDGER", f"sqlite:{tmp}/ledger{i}.sqlite")
    gdal.Translate(f"/vsiidem/{tmp}/out{i}.tif", src, format="IDEM")
    counts.append(open_files())
print(" ".join(map(str, counts)))
"""


def test_a_process_that_uses_many_ledgers_in_turn_keeps_a_few_open(tmp_path):
    """A process working into one ledger after another (a test suite, a notebook) keeps the few
    it used last open, not every one: its open files stop growing (docs/operations.md)."""
    src = make_source(tmp_path / "scene.tif", size=32, bands=1)
    proc = run(["/usr/bin/python3", "-c", MANY_LEDGERS, src, tmp_path, "12"], check=True)
    counts = [int(n) for n in proc.stdout.split()]
    assert counts[-1] == counts[5], counts  # the same from the fifth ledger on
    assert counts[4] > counts[0], counts  # the first ones stay open: the test can see growth
    for i in range(12):
        assert os.path.exists(tmp_path / f"out{i}.tif")
