# SPDX-License-Identifier: MIT
"""IDEM's creation options beside the FORMAT driver's own (docs/configuration.md): a driver
option whose name is one of IDEM's (netCDF's FORMAT) is written DRIVER.OPTION=VALUE, reaches the
driver and the key, and gives the direct call's file; ambiguity is refused before any work."""

import pytest
from osgeo import gdal

from idem_testlib import env_with, make_source, read_pixels, run, sqlite_ledger  # noqa: F401

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"  # netCDF-4 files are HDF5 files
CDF1_MAGIC = b"CDF\x01"  # netCDF-3 classic


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=64, bands=1)  # one netCDF variable


def magic(path, size):
    with open(path, "rb") as f:
        return f.read(size)


def translate(source, dst, *options):
    cmd = ["gdal_translate", "-q", "-of", "IDEM"]
    for option in options:
        cmd += ["-co", option]
    return cmd + [str(source), "/vsiidem/" + str(dst)]


def test_netcdf_format_option_written_qualified_reaches_the_driver(sqlite_ledger, source,  # noqa: F811
                                                                    tmp_path):
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.nc"
    direct = tmp_path / "direct.nc"
    run(["gdal_translate", "-q", "-of", "netCDF", "-co", "FORMAT=NC4", source, direct], check=True)
    run(translate(source, out, "FORMAT=netCDF", "netCDF.FORMAT=NC4"), env=env, check=True)
    assert magic(out, 8) == HDF5_MAGIC == magic(direct, 8)
    assert (read_pixels(out) == read_pixels(direct)).all()
    [row] = sqlite_ledger.completed()
    assert '"FORMAT":"NC4"' in row["work_json"].replace(" ", "")
    # The same work again is skipped; NC (netCDF-3) is other work: rebuilt, not skipped onto.
    run(translate(source, out, "FORMAT=netCDF", "netCDF.FORMAT=NC4"), env=env, check=True)
    assert len(sqlite_ledger.completed()) == 1
    run(translate(source, out, "FORMAT=netCDF", "netCDF.FORMAT=NC"), env=env, check=True)
    assert magic(out, 4) == CDF1_MAGIC
    assert len(sqlite_ledger.completed()) == 2


def test_qualified_option_is_keyed_like_the_plain_one(sqlite_ledger, source, tmp_path):  # noqa: F811
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.tif"
    run(translate(source, out, "COMPRESS=DEFLATE"), env=env, check=True)
    run(translate(source, out, "GTiff.COMPRESS=DEFLATE"), env=env, check=True)
    assert len(sqlite_ledger.completed()) == 1  # the second run skipped: the same key
    assert gdal.Info(str(out), format="json")["metadata"]["IMAGE_STRUCTURE"][
        "COMPRESSION"] == "DEFLATE"


@pytest.mark.parametrize("options, message", [
    (["FORMAT=NC4", "FORMAT=netCDF"], "FORMAT is given twice"),
    (["FORMAT=netCDF", "FORMAT=NC4"], "FORMAT is given twice"),
    (["FORMAT=NC4"], "netCDF.FORMAT=NC4"),
    (["FORMAT=GTiff", "netCDF.FORMAT=NC4"], "is a creation option of the netCDF driver"),
    (["COMPRESS=LZW", "GTiff.COMPRESS=DEFLATE"], "COMPRESS is given twice"),
    (["NAMESPACE=a", "NAMESPACE=b"], "NAMESPACE is given twice"),
], ids=["driver-format-first", "idem-format-first", "driver-format-alone", "other-driver",
        "twice-different", "namespace-twice"])
def test_ambiguous_options_are_refused_before_any_work(sqlite_ledger, source, tmp_path,  # noqa: F811
                                                       options, message):
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    out = tmp_path / "out.nc"
    proc = run(translate(source, out, *options), env=env)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert not out.exists()
    assert sqlite_ledger.rows() == []


def test_qualified_spelling_is_listed_by_gdalinfo_format():
    proc = run(["gdalinfo", "--format", "IDEM"], check=True)
    assert "DRIVER.*" in proc.stdout
