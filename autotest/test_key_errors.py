# SPDX-License-Identifier: MIT
"""Bad input to key derivation fails with a clear message and writes nothing."""

import os
import sqlite3
import subprocess

from conftest import key_env, run_dry, write_raster


def test_key_missing_vrt_source_is_keyed_and_the_work_fails_naming_it(tmp_path, key_output):
    """A VRT whose file is gone: the key records the file as missing (a call that never reads
    it works, as with GDAL: docs/keys.md, "Missing sources"); the warp, which reads it, fails as
    direct gdalwarp fails, naming the file, and writes and records nothing."""
    src = write_raster(tmp_path / "gone.tif")
    vrt = tmp_path / "broken.vrt"
    os.system(f"gdalbuildvrt -q {vrt} {src}")
    os.remove(src)
    warp = ["gdalwarp", "-of", "IDEM", "-t_srs", "EPSG:3857", str(vrt), key_output]
    proc = run_dry(warp[0], warp[1:])
    assert proc.returncode == 0, proc.stderr
    assert "IDEM dry run" in proc.stderr
    env = key_env(IDEM_DRY_RUN=None, IDEM_LEDGER=f"sqlite:{tmp_path}/ledger.sqlite")
    proc = subprocess.run(warp, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "gone.tif" in proc.stderr
    assert not os.path.exists(key_output.replace("/vsiidem/", "", 1))
    conn = sqlite3.connect(tmp_path / "ledger.sqlite")
    assert conn.execute("SELECT count(*) FROM ledger WHERE completed_at IS NOT NULL").fetchone() \
        == (0,)
    conn.close()


def test_key_unreadable_source_names_the_file(tmp_path, key_output):
    """A file a VRT names that is there but does not open is refused, naming it."""
    src = write_raster(tmp_path / "broken.tif")
    vrt = tmp_path / "broken.vrt"
    os.system(f"gdalbuildvrt -q {vrt} {src}")
    with open(src, "r+b") as f:
        f.write(b"\0" * 64)  # no longer a TIFF
    proc = run_dry("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", str(vrt), key_output])
    assert proc.returncode != 0
    assert "broken.tif" in proc.stderr
    assert "IDEM dry run" not in proc.stdout + proc.stderr
    assert not os.path.exists(key_output.replace("/vsiidem/", "", 1))


def test_key_bad_digest_policy_is_a_usage_error(key_source, key_output):
    proc = run_dry("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", key_source, key_output],
                   IDEM_SOURCE_DIGEST="MD5")
    assert proc.returncode != 0
    assert "IDEM_SOURCE_DIGEST" in proc.stderr


def test_key_unparseable_crs_is_refused(key_source, key_output):
    proc = run_dry("gdalwarp", ["-of", "IDEM", "-t_srs", "+proj=nonsense +foo", key_source,
                                key_output])
    assert proc.returncode != 0
    assert "IDEM dry run" not in proc.stdout + proc.stderr
