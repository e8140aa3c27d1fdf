# SPDX-License-Identifier: MIT
"""The same work gets the same key, whoever runs it and however it is spelled (docs/keys.md)."""

import hashlib
import os
import shutil
import subprocess

import pytest

from conftest import (cli_key, dry_run_key, gdal_translate_key, gdal_warp_key, rasterio_warp_key,
                      write_raster)
from idem_testlib import ledger  # noqa: F401  (fixture)

WEB_MERCATOR_PROJ = ("+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 +k=1 "
                     "+units=m +nadgrids=@null +wktext +no_defs")


def warp(src, dst, *extra):
    return ["-of", "IDEM", "-overwrite", "-t_srs", "EPSG:3857", "-r", "bilinear", *extra, src, dst]


def srs_text(definition, fmt):
    out = subprocess.run(["gdalsrsinfo", "-o", fmt, definition], capture_output=True, text=True,
                         check=True).stdout
    return out.strip()


@pytest.mark.parametrize("spelling", [
    "epsg:3857",
    "urn:ogc:def:crs:EPSG::3857",
    "wkt1",
    "wkt2",
    "projjson",
    WEB_MERCATOR_PROJ,
])
def test_key_same_for_every_crs_spelling(key_source, key_output, spelling):
    if spelling in ("wkt1", "wkt2", "projjson"):
        spelling = srs_text("EPSG:3857", {"wkt1": "wkt1", "wkt2": "wkt2_2019",
                                          "projjson": "PROJJSON"}[spelling])
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    other = dry_run_key("gdalwarp", ["-of", "IDEM", "-overwrite", "-t_srs", spelling, "-r",
                                     "bilinear", key_source, key_output])
    assert other == base


def test_key_same_for_source_bytes_at_another_path(tmp_path, key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    elsewhere = tmp_path / "elsewhere" / "renamed.tif"
    elsewhere.parent.mkdir()
    shutil.copyfile(key_source, elsewhere)
    os.utime(elsewhere, (1_000_000_000, 1_000_000_000))  # a different mtime too
    assert dry_run_key("gdalwarp", warp(str(elsewhere), key_output)) == base
    # relative to a working directory, instead of absolute
    assert dry_run_key("gdalwarp", warp("renamed.tif", key_output),
                       cwd=elsewhere.parent) == base


def test_key_same_after_touch(key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    os.utime(key_source, None)
    assert dry_run_key("gdalwarp", warp(key_source, key_output)) == base


@pytest.mark.parametrize("extra", [
    ["-multi"],
    ["-wo", "NUM_THREADS=4"],
    ["-wo", "NUM_THREADS=ALL_CPUS", "-multi"],
    ["-wm", "500"],
    ["-wm", "2%"],
    ["-q"],
    ["--config", "GDAL_CACHEMAX", "512"],
    ["--config", "GDAL_NUM_THREADS", "ALL_CPUS"],
    ["-co", "NUM_THREADS=ALL_CPUS"],
])
def test_key_same_for_attempt_settings(key_source, key_output, extra):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert dry_run_key("gdalwarp", warp(key_source, key_output, *extra)) == base


def test_key_same_from_another_working_directory(tmp_path, key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    (tmp_path / "cwd").mkdir()
    assert dry_run_key("gdalwarp", warp(key_source, key_output), cwd=tmp_path / "cwd") == base
    assert dry_run_key("gdalwarp", warp(key_source, key_output), cwd="/") == base


def test_key_same_through_relative_output_in_its_directory(tmp_path, key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert dry_run_key("gdalwarp", warp(key_source, "/vsiidem/tile.tif"),
                       cwd=tmp_path / "out") == base


def test_key_same_for_creation_option_name_case(key_source, key_output):
    upper = dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "COMPRESS=DEFLATE",
                                         "-co", "TILED=YES"))
    lower = dry_run_key("gdalwarp", warp(key_source, key_output, "-co", "tiled=YES",
                                         "-co", "compress=DEFLATE"))
    assert upper == lower


def test_key_same_through_gdalwarp_gdal_warp_rasterio_and_cli(key_source, key_output):
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    assert gdal_warp_key(key_source, key_output, dstSRS="EPSG:3857",
                         resampleAlg="bilinear") == base
    assert rasterio_warp_key(key_source, key_output, "EPSG:3857", resampling="bilinear") == base
    assert cli_key(["gdalwarp"] + warp(key_source, key_output)) == base


def test_key_same_through_rasterio_with_nodata_single_band(tmp_path, key_output):
    # rasterio adds UNIFIED_SRC_NODATA=YES and INIT_DEST=NO_DATA; with one band GDAL's warper
    # treats the source nodata mask identically either way, so the key must not change.
    src = write_raster(tmp_path / "nd.tif", nodata=0)
    base = dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", src, key_output])
    assert rasterio_warp_key(src, key_output, "EPSG:3857") == base
    assert gdal_warp_key(src, key_output, dstSRS="EPSG:3857") == base


def test_key_same_through_gdal_translate_and_gdal_translate_python(key_source, key_output):
    args = ["-of", "IDEM", "-outsize", "20", "15", "-r", "average", key_source, key_output]
    base = dry_run_key("gdal_translate", args)
    assert gdal_translate_key(key_source, key_output, width=20, height=15,
                              resampleAlg="average") == base
    assert cli_key(["gdal_translate"] + args) == base


def test_key_plain_copy_same_for_source_at_another_path(tmp_path, key_source, key_output):
    base = dry_run_key("gdal_translate", ["-of", "IDEM", key_source, key_output])
    copy = tmp_path / "copy.tif"
    shutil.copyfile(key_source, copy)
    assert dry_run_key("gdal_translate", ["-of", "IDEM", str(copy), key_output]) == base


def test_key_same_through_a_vrt_moved_with_its_sources(tmp_path, key_output):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        write_raster(tmp_path / name / "scene.tif")
        subprocess.run(["gdalbuildvrt", "-q", "mosaic.vrt", "scene.tif"], cwd=tmp_path / name,
                       check=True)
    keys = {dry_run_key("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857",
                                     str(tmp_path / name / "mosaic.vrt"), key_output])
            for name in ("a", "b")}
    assert len(keys) == 1


LAEA_NO_EPSG = "+proj=laea +lat_0=45 +lon_0=13 +x_0=0 +y_0=0 +ellps=GRS80 +units=m +no_defs"


@pytest.mark.parametrize("target", ["EPSG:3857", LAEA_NO_EPSG, "EPSG:4326"])
def test_crs_memo_in_the_ledger_gives_the_keys_computed_without_it(tmp_path, key_source, target,
                                                                   ledger):
    """Worker processes remember CRS normalisations in the ledger's digest cache (docs/keys.md):
    the key of a warp must be the same whether PROJ was asked (first process) or the memo was
    read (next processes), and the same as a dry run that has no ledger at all. The next
    processes read every answer in one lookup (one round trip to a PostgreSQL ledger), together
    with the source's digest."""
    from idem_testlib import env_with, warp_reporting
    # The source was written just now: with the racy window (docs/keys.md, "Digest cache") its
    # digest would not be cached yet.
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_DIGEST_RACY_SECONDS=0)
    keys, jsons = [], []
    for attempt in range(2):
        out = tmp_path / f"out{attempt}.tif"
        args = ["-of", "IDEM", "-overwrite", "-t_srs", target, "-r", "bilinear", "-co",
                "NAMESPACE=memo", key_source, f"/vsiidem/{out}"]
        _, report = warp_reporting(["gdalwarp"] + args, env=env)
        # The first process fills the memo; the second reads every answer from it, with the
        # source's digest, in one lookup.
        if attempt == 0:
            assert report["MEMO_ENTRIES_FOUND"] == "0", report
        else:
            assert int(report["MEMO_ENTRIES_FOUND"]) >= 2, report
            assert report["SOURCE_DIGESTS_FOUND"] == "1", report
            assert report["DIGEST_LOOKUPS_BATCHED"] == "1", report
            assert report["DIGEST_LOOKUPS_SINGLE"] == "0", report
        row, = ledger.rows("output_uri = %s", (str(out),))
        assert ledger.count("source_digest", "path LIKE %s", ("idem-memo:crs-v1:%",)) >= 2
        keys.append(row["work_key"])
        jsons.append(row["work_json"].replace(str(out), "OUT"))
        assert dry_run_key("gdalwarp", args) == row["work_key"]
    assert jsons[0] == jsons[1]


def content_digest(path):
    """docs/keys.md, "Content digest": SHA-256 over the SHA-256 of each 1 MiB piece."""
    data = open(path, "rb").read()
    n = len(data)
    leaves = b"".join(hashlib.sha256(b"\x00" + data[i:i + 2**20]).digest()
                      for i in range(0, n, 2**20))
    return hashlib.sha256(b"\x01" + n.to_bytes(8, "big") + leaves).hexdigest()


def test_source_digest_is_the_documented_content_digest(tmp_path):
    # 3 bands of 1100x1000 bytes, uncompressed: three whole pieces and a part.
    src = tmp_path / "big.tif"
    write_raster(src, width=1100, height=1000, bands=3)
    assert os.path.getsize(src) > 3 * 2**20
    report = cli_key(["gdal_translate", "-of", "IDEM", str(src), str(tmp_path / "out.tif")],
                     as_json=True)
    assert report["work"]["source"] == {"files": [{"sha256_tree": content_digest(src)}]}
    # Not the plain SHA-256 of the file.
    assert content_digest(src) != hashlib.sha256(open(src, "rb").read()).hexdigest()


@pytest.mark.parametrize("spelling", [
    "+proj=utm +zone=31 +datum=WGS84 +units=m +no_defs",
    "EPSG:32631",
])
def test_key_same_for_source_crs_spelled_equivalently(key_source, key_output, spelling):
    """The source file is EPSG:32631: an -s_srs that PROJ finds equivalent (a PROJ string, whose
    base geographic CRS is longitude first where EPSG's is latitude first) is the same work."""
    base = dry_run_key("gdalwarp", warp(key_source, key_output))
    other = dry_run_key("gdalwarp", warp(key_source, key_output, "-s_srs", spelling))
    assert other == base
