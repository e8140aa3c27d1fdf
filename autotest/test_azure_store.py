# SPDX-License-Identifier: MIT
"""Sources and outputs on /vsiaz/ against Azurite (tools/azurite): how a blob source enters the
key (Azure's Content-MD5, since a blob's ETag changes with every write), and what IDEM's own
conditional Put Blob leaves in the container."""

import json
import os
import sqlite3

import pytest
from osgeo import gdal

from azuriteserver import AzuriteServer
from idem_testlib import GDAL_IDEM, env_with, gdal_config, make_source, read_pixels, run

CONTAINER = "idem-test"


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    server = AzuriteServer(tmp_path_factory.mktemp("azurite")).start()
    with gdal_config(server.config()):
        assert gdal.Mkdir(f"/vsiaz/{CONTAINER}", 0o755) == 0
        yield server
    server.stop()


def upload(uri, data):
    f = gdal.VSIFOpenL(uri, "wb")
    gdal.VSIFWriteL(data, 1, len(data), f)
    assert gdal.VSIFCloseL(f) == 0
    gdal.VSICurlClearCache()
    return gdal.GetFileMetadata(uri, "HEADERS")["etag"]


@pytest.mark.parametrize("read_as", ["vsiaz", "vsiadls"])
def test_a_blob_source_reuploaded_with_the_same_bytes_keeps_its_key(azurite, tmp_path, read_as):
    """A blob's ETag changes with every write; its Content-MD5 is the MD5 of its bytes. The
    source is read through /vsiaz/ or /vsiadls/ (a Data Lake filesystem, whose files are blobs)."""
    local = make_source(tmp_path / "scene.tif", size=64)
    with open(local, "rb") as f:
        content = f.read()
    stored = f"/vsiaz/{CONTAINER}/sources/{read_as}/scene.tif"
    uri = f"/{read_as}/{CONTAINER}/sources/{read_as}/scene.tif"
    ledger = f"sqlite:{tmp_path / 'ledger.sqlite'}"
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger, **azurite.config())

    def warp():
        run(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:4326", uri,
             "/vsiidem/" + str(out)], env=env, check=True)
        return os.stat(out).st_mtime_ns

    first = upload(stored, content)
    mtime = warp()
    assert upload(stored, content) != first  # a new ETag for the same bytes
    assert warp() == mtime                    # skipped: keyed by the blob's Content-MD5
    changed = bytearray(content)
    changed[-1] ^= 0xFF
    upload(stored, bytes(changed))
    assert warp() != mtime                 # other bytes: a new work
    proc = run([GDAL_IDEM, "--ledger", ledger, "--json", "status"])
    assert json.loads(proc.stdout)["completed"] >= 1


@pytest.mark.parametrize("prefix", ["vsiaz", "vsiadls"])
def test_an_output_is_one_block_blob_with_its_sidecars(azurite, tmp_path, prefix):
    """IDEM's own Put Blob: the output and its .aux.xml are block blobs with the pixels of the
    direct call, and the ledger records the blob's ETag; the same for an output named through
    /vsiadls/ (its files are blobs of the filesystem's container)."""
    src = make_source(tmp_path / "scene.tif", size=64)
    uri = f"/{prefix}/{CONTAINER}/outputs/{prefix}/a.png"
    env = env_with(IDEM_LEDGER=f"sqlite:{tmp_path / 'ledger.sqlite'}",
                   CPL_TMPDIR=str(tmp_path), **azurite.config())
    run(["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=PNG", src, "/vsiidem/" + uri],
        env=env, check=True)
    direct = tmp_path / "direct.png"
    run(["gdal_translate", "-q", "-of", "PNG", src, direct], check=True)
    gdal.VSICurlClearCache()
    assert (read_pixels(uri) == read_pixels(str(direct))).all()
    for name in (uri, uri + ".aux.xml"):
        assert gdal.GetFileMetadata(name, "HEADERS")["x-ms-blob-type"] == "BlockBlob", name
    conn = sqlite3.connect(str(tmp_path / "ledger.sqlite"))
    rows = conn.execute("SELECT output_uri, output_etag FROM ledger "
                        "WHERE completed_at IS NOT NULL").fetchall()
    conn.close()
    assert rows == [(uri, gdal.GetFileMetadata(uri, "HEADERS")["etag"])]
