"""Bad input to key derivation fails with a clear message and writes nothing."""

import os

from conftest import run_dry, write_raster


def test_key_unreadable_source_names_the_file(tmp_path, key_output):
    src = write_raster(tmp_path / "gone.tif")
    vrt = tmp_path / "broken.vrt"
    os.system(f"gdalbuildvrt -q {vrt} {src}")
    os.remove(src)
    proc = run_dry("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", str(vrt), key_output])
    assert proc.returncode != 0
    assert "gone.tif" in proc.stderr
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
