"""A warp into COG with COG's grid options (TILING_SCHEME, TARGET_SRS...) runs as `gdalwarp -of
COG` runs it (docs/internals.md §11): the pixels against the direct call are compared option by
option in test_differential.py (the `cog_*` cases); this file covers what IDEM refuses, since it
cannot do what the direct call does, and what it reports and keys."""

import json

from osgeo import gdal

from idem_testlib import (assert_same_pixels, env_with, make_source, run,  # noqa: F401
                          sqlite_ledger, temp_dirs_beside, warp_reporting)

gdal.UseExceptions()

TILING = ["-co", "FORMAT=COG", "-co", "TILING_SCHEME=GoogleMapsCompatible"]


def refused(tmp_path, sqlite_ledger, arguments, sources):
    """Runs an IDEM gdalwarp that must be refused; returns its stderr after checking that it
    exited non-zero and left nothing behind: no output, no temporary directory, no ledger row."""
    out = tmp_path / "out.tif"
    proc = run(["gdalwarp", "-q", "-of", "IDEM", *TILING, *arguments, *sources,
                f"/vsiidem/{out}"], env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0, proc.stderr
    assert not out.exists()
    assert temp_dirs_beside(out) == []
    assert sqlite_ledger.rows() == []
    return proc.stderr


def test_several_sources_warped_before_idem_are_refused(tmp_path, sqlite_ledger):
    # gdalwarp warps several sources into a temporary file before calling IDEM unless they are a
    # plain mosaic: the COG's grid can no longer be part of that warp.
    a = make_source(tmp_path / "a.tif", size=128)
    b = make_source(tmp_path / "b.tif", size=128, origin=(501280.0, 4650000.0), seed=2)
    message = refused(tmp_path, sqlite_ledger, ["-t_srs", "EPSG:3857"], [a, b])
    assert "gdalbuildvrt" in message


def test_a_grid_without_t_srs_is_refused(tmp_path, sqlite_ledger):
    # gdalwarp -of COG reads -te in the COG's CRS when there is no -t_srs; IDEM sees the warp
    # in the source's CRS and cannot tell what the user wrote.
    src = make_source(tmp_path / "src.tif", size=128)
    message = refused(tmp_path, sqlite_ledger,
                      ["-te", "500000", "4649000", "501000", "4650000", "-ts", "100", "100"],
                      [src])
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
                      [src])
    assert "gdalwarp -of COG" in message


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
