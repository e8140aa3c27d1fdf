# SPDX-License-Identifier: MIT
"""A warp into COG with COG's grid options (TILING_SCHEME, TARGET_SRS...) runs as `gdalwarp -of
COG` runs it (docs/internals.md §11, §12): the pixels against the direct call are compared option
by option in test_differential.py (the `cog_*` cases); this file covers what IDEM refuses through
gdal.Warp, whose options it cannot see, what the gdalwarp program gets instead, and what it
reports and keys."""

import json

from osgeo import gdal

from idem_testlib import (assert_same_pixels, env_with, make_source, run,  # noqa: F401
                          sqlite_ledger, temp_dirs_beside, warp_reporting)

gdal.UseExceptions()

TILING = ["-co", "FORMAT=COG", "-co", "TILING_SCHEME=GoogleMapsCompatible"]


def refused(tmp_path, sqlite_ledger, arguments, source):
    """Runs an IDEM warp through gdal.Warp that must be refused; returns its stderr after
    checking that it exited non-zero and left nothing behind: no output, no temporary directory,
    no ledger row."""
    out = tmp_path / "out.tif"
    proc, _ = warp_reporting(["gdalwarp", "-q", "-of", "IDEM", *TILING, *arguments, source,
                              f"/vsiidem/{out}"], env=env_with(IDEM_LEDGER=sqlite_ledger.dsn),
                             check=False)
    assert proc.returncode != 0, proc.stderr
    assert not out.exists()
    assert temp_dirs_beside(out) == []
    assert sqlite_ledger.rows() == []
    return proc.stderr


def test_several_sources_are_warped_as_gdalwarp_does(tmp_path, sqlite_ledger):
    # gdalwarp warps several sources that are not a plain mosaic into a temporary file before
    # calling IDEM, not onto the COG's grid: under the gdalwarp program IDEM reads its command
    # line and warps the sources again as gdalwarp -of COG does (docs/internals.md §12).
    a = make_source(tmp_path / "a.tif", size=128)
    b = make_source(tmp_path / "b.tif", size=128, origin=(501280.0, 4650000.0), seed=2)
    warp = ["-t_srs", "EPSG:3857", "-r", "bilinear", "-co", "TILING_SCHEME=GoogleMapsCompatible"]
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-q", "-of", "COG", *warp, a, b, direct], check=True)
    out = tmp_path / "out.tif"
    cmd = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=COG", *warp, a, b,
           f"/vsiidem/{out}"]
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(cmd, env=env, check=True)
    assert_same_pixels(out, direct)
    assert gdal.Open(str(out)).GetGeoTransform() == gdal.Open(str(direct)).GetGeoTransform()
    [row] = sqlite_ledger.completed()
    work = json.loads(row["work_json"])
    assert work["gdalwarp_warp"] == ["-t_srs", "EPSG:3857", "-r", "bilinear"]
    assert len(work["sources"]) == 2 and "source" not in work
    assert temp_dirs_beside(out) == []

    before = out.stat()
    run(cmd, env=env, check=True)
    assert (out.stat().st_ino, out.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(sqlite_ledger.completed()) == 1

    # The key holds the sources, beside GDAL's temporary file: another source is other work.
    make_source(b, size=128, origin=(501280.0, 4650000.0), seed=3)
    run(["gdalwarp", "-q", "-overwrite", "-of", "COG", *warp, a, b, direct], check=True)
    run(cmd, env=env, check=True)
    assert_same_pixels(out, direct)
    assert len(sqlite_ledger.completed()) == 2


def write_cutline(path, east):
    path.write_text(json.dumps({
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32633"}},
        "features": [{"type": "Feature", "properties": {}, "geometry": {
            "type": "Polygon", "coordinates": [[[500100, 4649900], [east, 4649700],
                                                [east, 4649000], [500200, 4649100],
                                                [500100, 4649900]]]}}]}))


def test_several_sources_with_a_changed_cutline_are_rebuilt(tmp_path, sqlite_ledger):
    # The command names the cutline; what it holds decides pixels: the same command after the
    # cutline changed is other work, not a skip onto the first output.
    a = make_source(tmp_path / "a.tif", size=128)
    b = make_source(tmp_path / "b.tif", size=128, origin=(501280.0, 4650000.0), seed=2)
    cutline = tmp_path / "cutline.geojson"
    warp = ["-t_srs", "EPSG:3857", "-cutline", str(cutline), "-co",
            "TILING_SCHEME=GoogleMapsCompatible"]
    out = tmp_path / "out.tif"
    cmd = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=COG", *warp, a, b,
           f"/vsiidem/{out}"]
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    direct = tmp_path / "direct.tif"
    write_cutline(cutline, 502400)
    run(cmd, env=env, check=True)
    run(["gdalwarp", "-q", "-overwrite", "-of", "COG", *warp, a, b, direct], check=True)
    assert_same_pixels(out, direct)

    write_cutline(cutline, 501900)
    run(["gdalwarp", "-q", "-overwrite", "-of", "COG", *warp, a, b, direct], check=True)
    run(cmd, env=env, check=True)
    assert len(sqlite_ledger.completed()) == 2
    assert_same_pixels(out, direct)
    [work] = [json.loads(row["work_json"]) for row in sqlite_ledger.completed()][-1:]
    assert "cutline" in work and "materialised" in work


def test_several_sources_warped_before_idem_by_gdal_warp_are_refused(tmp_path, sqlite_ledger):
    # gdal.Warp's arguments cannot be seen: the COG's grid can no longer be part of the warp.
    a = make_source(tmp_path / "a.tif", size=128)
    b = make_source(tmp_path / "b.tif", size=128, origin=(501280.0, 4650000.0), seed=2)
    out = tmp_path / "out.tif"
    code = ("from osgeo import gdal\ngdal.UseExceptions()\n"
            f"gdal.Warp({'/vsiidem/' + str(out)!r}, [{str(a)!r}, {str(b)!r}], format='IDEM', "
            "dstSRS='EPSG:3857', creationOptions=['FORMAT=COG', "
            "'TILING_SCHEME=GoogleMapsCompatible'])\n")
    proc = run(["/usr/bin/python3", "-c", code], env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0, proc.stderr
    assert "gdal.BuildVRT" in proc.stderr
    assert not out.exists()
    assert temp_dirs_beside(out) == []
    assert sqlite_ledger.rows() == []


def test_a_grid_without_t_srs_is_refused(tmp_path, sqlite_ledger):
    # gdalwarp -of COG reads -te in the COG's CRS when there is no -t_srs; IDEM sees the warp
    # in the source's CRS and cannot tell what the user wrote.
    src = make_source(tmp_path / "src.tif", size=128)
    message = refused(tmp_path, sqlite_ledger,
                      ["-te", "500000", "4649000", "501000", "4650000", "-ts", "100", "100"],
                      src)
    assert "-t_srs" in message


def test_a_cutline_is_refused(tmp_path, sqlite_ledger):
    src = make_source(tmp_path / "src.tif", size=128)
    cutline = tmp_path / "cutline.geojson"
    cutline.write_text(json.dumps({
        "type": "FeatureCollection",
        "crs": {"type": "name", "properties": {"name": "urn:ogc:def:crs:EPSG::32633"}},
        "features": [{"type": "Feature", "properties": {}, "geometry": {
            "type": "Polygon", "coordinates": [[[500100, 4649100], [500900, 4649100],
                                                [500900, 4649900], [500100, 4649100]]]}}]}))
    message = refused(tmp_path, sqlite_ledger, ["-t_srs", "EPSG:3857", "-cutline", cutline],
                      src)
    assert "gdalwarp -of COG" in message


def test_the_gdalwarp_program_gets_what_it_asks(tmp_path, sqlite_ledger):
    # What gdal.Warp is refused (a -te read in the COG's CRS, above) or gets otherwise (an
    # explicit -r near, taken as not given: docs/keys.md), the gdalwarp program gets as the
    # direct call: IDEM reads its command line.
    src = make_source(tmp_path / "src.tif", size=128)
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    for i, arguments in enumerate([
            ["-te", "1669800", "5158000", "1673200", "5161200", "-ts", "200", "200"],
            ["-t_srs", "EPSG:3857", "-r", "near"]]):
        direct = tmp_path / f"direct{i}.tif"
        run(["gdalwarp", "-q", "-of", "COG", *TILING[2:], *arguments, src, direct], check=True)
        out = tmp_path / f"out{i}.tif"
        cmd = ["gdalwarp", "-q", "-of", "IDEM", *TILING, *arguments, src, f"/vsiidem/{out}"]
        run(cmd, env=env, check=True)
        assert_same_pixels(out, direct)
        assert gdal.Open(str(out)).GetGeoTransform() == gdal.Open(str(direct)).GetGeoTransform()
        row = sqlite_ledger.rows("output_uri = %s", (str(out),))[-1]
        work = json.loads(row["work_json"])
        assert (work["gdalwarp_warp"], work["cog_warp"]) == (arguments, "gdalwarp")
        before = out.stat()
        run(cmd[:2] + ["-overwrite"] + cmd[2:], env=env, check=True)
        assert (out.stat().st_ino, out.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(sqlite_ledger.completed()) == 2


def test_the_warp_is_gdalwarps_and_reruns_skip(tmp_path, sqlite_ledger):
    src = make_source(tmp_path / "src.tif", size=256)
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-q", "-of", "COG", "-t_srs", "EPSG:3857", "-r", "bilinear",
         "-co", "TILING_SCHEME=GoogleMapsCompatible", src, direct], check=True)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    cmd = ["gdalwarp", "-of", "IDEM", *TILING, "-t_srs", "EPSG:3857", "-r", "bilinear", src,
           f"/vsiidem/{out}"]
    _, report = warp_reporting(cmd, env=env)
    assert report["OUTCOME"] == "WRITTEN"
    assert (report["WARP_OPTIONS"], report["WARP_RUN_BY"]) == ("ARGUMENTS", "GDALWARP")
    assert_same_pixels(out, direct)
    reopened = gdal.Open(str(out))
    assert reopened.RasterXSize == gdal.Open(str(direct)).RasterXSize
    assert reopened.GetMetadataItem("LAYOUT", "IMAGE_STRUCTURE") == "COG"
    reopened = None
    before = out.stat()
    _, report = warp_reporting(cmd, env=env)
    assert report["OUTCOME"] == "SKIPPED"
    assert (out.stat().st_ino, out.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert len(sqlite_ledger.completed()) == 1


def test_the_key_says_so(tmp_path):
    # Outputs of earlier releases, warped twice, are not skipped to: the work is keyed apart.
    src = make_source(tmp_path / "src.tif", size=64)

    def work(*co):
        gdal.SetConfigOption("IDEM_DRY_RUN", "YES")
        try:
            ds = gdal.Warp(f"/vsiidem/{tmp_path / 'out.tif'}", src, format="IDEM",
                           dstSRS="EPSG:3857", creationOptions=["FORMAT=COG", *co])
        finally:
            gdal.SetConfigOption("IDEM_DRY_RUN", None)
        return json.loads(ds.GetMetadataItem("WORK", "IDEM"))

    assert work("TILING_SCHEME=GoogleMapsCompatible")["cog_warp"] == "gdalwarp"
    assert work("TARGET_SRS=EPSG:3857")["cog_warp"] == "gdalwarp"
    assert "cog_warp" not in work()
    assert "cog_warp" not in work("TILING_SCHEME=CUSTOM")
