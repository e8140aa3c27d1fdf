# SPDX-License-Identifier: MIT
"""Directory datasets (Zarr) as IDEM outputs (docs/vsiidem.md, "Directory datasets"): a rerun
skips and leaves every file of the directory as it was, a directory IDEM did not publish (or one
changed since its completion) is refused and kept whole, and a rerun that fails loses nothing. From GDAL 3.11, GDAL's
pre-delete removes the files of an existing directory dataset before calling the driver:
/vsiidem/ defers those unlinks and the IDEM call resolves them."""

import os
import shutil

import pytest
from osgeo import gdal

from idem_testlib import (env_with, gdal_config, make_source, run, sqlite_ledger,  # noqa: F401
                          temp_dirs_beside)
from motoserver import MotoS3Server

gdal.UseExceptions()

pytestmark = pytest.mark.skipif(gdal.GetDriverByName("Zarr") is None,
                                reason="this GDAL has no Zarr driver")


def tree(path):
    """Every file under `path`: relative path -> (inode, mtime_ns, bytes)."""
    found = {}
    for directory, _, names in os.walk(path):
        for name in names:
            full = os.path.join(directory, name)
            st = os.stat(full)
            with open(full, "rb") as f:
                found[os.path.relpath(full, path)] = (st.st_ino, st.st_mtime_ns, f.read())
    return found


def translate(src, out, ledger, **env):
    return run(["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=Zarr", src,
                f"/vsiidem/{out}"], env=env_with(IDEM_LEDGER=ledger.dsn, **env))


@pytest.fixture
def zarr_output(tmp_path, sqlite_ledger):
    src = make_source(tmp_path / "src.tif", size=128)
    out = tmp_path / "out.zarr"
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode == 0, proc.stderr
    assert out.is_dir()
    # The same name in another directory: GDAL names the Zarr's array after the directory.
    (tmp_path / "direct").mkdir()
    direct = tmp_path / "direct" / "out.zarr"
    run(["gdal_translate", "-q", "-of", "Zarr", src, direct], check=True)
    return src, out, direct


def test_a_rerun_skips_and_leaves_every_file(zarr_output, sqlite_ledger):
    src, out, direct = zarr_output
    assert {k: v[2] for k, v in tree(out).items()} == {k: v[2] for k, v in tree(direct).items()}
    before = tree(out)
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode == 0, proc.stderr
    assert tree(out) == before
    assert len(sqlite_ledger.completed()) == 1
    assert temp_dirs_beside(out) == []


@pytest.mark.parametrize("change", ["touched", "added"])
def test_a_changed_directory_is_refused_and_kept_whole(zarr_output, sqlite_ledger, change):
    """A directory IDEM published that changed since its completion (a chunk rewritten, a file
    added: someone's work now) is not replaced: the rerun is refused before any claim, naming the
    directory, and loses nothing, as plain GDAL refuses to write over an existing dataset. Once
    the directory is removed, the rerun builds it again, and the next one skips."""
    src, out, direct = zarr_output
    if change == "touched":
        chunk = next(os.path.join(d, n) for d, _, names in os.walk(out) for n in names
                     if not n.startswith("."))
        os.utime(chunk, ns=(0, 0))
    else:
        (out / "notes.txt").write_text("someone's notes")
    before = tree(out)
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode != 0
    assert str(out) in proc.stderr and "remove it" in proc.stderr
    assert tree(out) == before
    assert temp_dirs_beside(out) == []
    shutil.rmtree(out)
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode == 0, proc.stderr
    assert {k: v[2] for k, v in tree(out).items()} == {k: v[2] for k, v in tree(direct).items()}
    # The rebuilt directory is the one the ledger records: the next rerun skips.
    again = tree(out)
    assert translate(src, out, sqlite_ledger).returncode == 0
    assert tree(out) == again


def test_a_failed_rerun_loses_nothing(zarr_output, sqlite_ledger):
    src, out, _ = zarr_output
    before = tree(out)
    # Refused before any claim (a lease too short), after GDAL's pre-delete.
    proc = translate(src, out, sqlite_ledger, IDEM_STALE_SECONDS="1")
    assert proc.returncode != 0
    assert "lease" in proc.stderr
    assert tree(out) == before


def test_a_new_source_rebuilds_it(zarr_output, sqlite_ledger, tmp_path):
    src, out, _ = zarr_output
    make_source(src, size=128, seed=9)
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "direct2").mkdir()
    direct = tmp_path / "direct2" / "out.zarr"
    run(["gdal_translate", "-q", "-of", "Zarr", src, direct], check=True)
    a, b = gdal.Open(str(out)), gdal.Open(str(direct))
    for name, _ in a.GetSubDatasets() or [(str(out), "")]:
        other = name.replace(str(out), str(direct))
        assert (gdal.Open(name).ReadAsArray() == gdal.Open(other).ReadAsArray()).all()
    assert len(b.GetSubDatasets()) == len(a.GetSubDatasets())
    # Two works on one output: the first's completion is superseded by the second's.
    current = [r for r in sqlite_ledger.completed() if r["superseded_at"] is None]
    assert len(current) == 1 and len(sqlite_ledger.completed()) == 2


def test_object_storage_refuses_it_before_any_claim(tmp_path, sqlite_ledger):
    """A Zarr is many objects, which no request publishes at once: refused before the claim,
    with nothing uploaded and what the bucket held left as it was (a directory written to
    /vsis3/ once uploaded an empty object at the output's name)."""
    src = make_source(tmp_path / "src.tif", size=64)
    cpl_tmpdir = tmp_path / "cpl_tmpdir"  # where an object output's temporary files are
    cpl_tmpdir.mkdir()
    server = MotoS3Server(buckets=["zarr-test"]).start()
    try:
        config = server.config()
        with gdal_config(config):
            run(["gdal_translate", "-q", "-of", "Zarr", src, "/vsis3/zarr-test/out.zarr"],
                env=env_with(**config), check=True)
            before = {name: gdal.VSIStatL(f"/vsis3/zarr-test/{name}").size
                      for name in gdal.ReadDirRecursive("/vsis3/zarr-test")}
            for output in ("out.zarr", "new.zarr"):
                proc = translate(src, f"/vsis3/zarr-test/{output}", sqlite_ledger,
                                 CPL_TMPDIR=str(cpl_tmpdir), **config)
                assert proc.returncode != 0
                assert "cannot publish a Zarr dataset to object storage" in proc.stderr
                gdal.VSICurlClearCache()
                after = {name: gdal.VSIStatL(f"/vsis3/zarr-test/{name}").size
                         for name in gdal.ReadDirRecursive("/vsis3/zarr-test")}
                assert after == before
            assert sqlite_ledger.rows() == []
            assert list(cpl_tmpdir.iterdir()) == []
    finally:
        server.stop()


@pytest.mark.parametrize("store", ["zgroup", "arrays"])
def test_a_store_idem_never_made_is_refused_and_kept(tmp_path, sqlite_ledger, store):
    """A Zarr output onto an existing store that no completion recorded (a .zgroup is enough for
    GDAL to call it Zarr; someone's arrays and files in it) is refused before any claim, as plain
    GDAL refuses ("already exists"), and every file of the store stays as it was."""
    src = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "theirs.zarr"
    if store == "zgroup":
        out.mkdir()
        (out / ".zgroup").write_text('{"zarr_format": 2}')
        (out / "README").write_text("someone's store")
    else:
        plain = run(["gdal_translate", "-q", "-of", "Zarr", src, str(out)])
        assert plain.returncode == 0, plain.stderr
        (out / "notes.txt").write_text("someone's notes")
    before = tree(out)
    proc = translate(src, out, sqlite_ledger)
    assert proc.returncode != 0
    assert str(out) in proc.stderr
    assert tree(out) == before
    assert temp_dirs_beside(out) == []
    assert sqlite_ledger.rows() == []
