# SPDX-License-Identifier: MIT
"""The gdal_idem Python package (python/gdal_idem; installed by make install and the Debian
package): warp() and translate() return what each call did, read from the driver's RESULT
metadata, checked here against the ledger's rows and the files; errors are exceptions with a
kind; Ledger() answers what `gdal-idem --json` answers. SQLite and PostgreSQL ledgers."""

import hashlib
import os
import sys
import threading

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, INSTALLED, ROOT, PausedWorker, env_with, file_state, kill9,
                          ledger, make_source, sqlite_ledger)  # noqa: F401

if not INSTALLED:
    sys.path.insert(0, os.path.join(ROOT, "python"))
import gdal_idem  # noqa: E402

WARP = {"dstSRS": "EPSG:3857", "resampleAlg": "bilinear"}


@pytest.fixture(autouse=True)
def _gdal_idem_command(monkeypatch):
    if not INSTALLED:
        monkeypatch.setenv("GDAL_IDEM", GDAL_IDEM)


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "src.tif", size=96)


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_warp_says_built_then_skipped_as_the_ledger_and_files_do(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    built = gdal_idem.warp(out, source, ledger=ledger.dsn, layer="scenes", **WARP)
    row = ledger.completed()[0]
    assert (built.outcome, built.attempt, built.key) == ("built", 1, row["work_key"])
    assert built.output == str(out) == row["output_uri"] and row["layer"] == "scenes"
    assert built.files == [str(out)]
    assert built.sha256() == {str(out): sha256(out)}
    assert built.timings["write"] > 0 and built.timings["elapsed"] >= built.timings["write"]
    before = file_state(out)
    again = gdal_idem.warp(str(out), source, ledger=ledger.dsn, layer="scenes", **WARP)
    assert (again.outcome, again.skipped, again.key, again.attempt) == \
        ("skipped", True, built.key, 1)
    assert "write" not in again.timings
    assert file_state(out) == before
    assert again.as_dict()["outcome"] == "skipped"
    # The same work written directly by GDAL has the same pixels (the key's work, not another).
    direct = gdal.Warp(str(tmp_path / "direct.tif"), source, **WARP)
    assert direct.GetRasterBand(1).Checksum() == \
        gdal.Open(str(out)).GetRasterBand(1).Checksum()


def test_translate_with_a_format_and_sidecars_names_every_file(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.png"
    result = gdal_idem.translate(out, source, ledger=sqlite_ledger.dsn, format="PNG",
                                 namespace="thumbs", creationOptions={"ZLEVEL": "9"})
    row = sqlite_ledger.completed()[0]
    assert row["namespace"] == "thumbs" and result.key == row["work_key"]
    assert result.files[0] == str(out) and str(out) + ".aux.xml" in result.files
    assert set(result.sha256()) == set(result.files)
    assert gdal.Open(str(out)).GetDriver().ShortName == "PNG"


def test_a_changed_source_is_rebuilt_and_explained(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    first = gdal_idem.warp(out, source, ledger=sqlite_ledger.dsn, **WARP)
    make_source(source, size=96, seed=7)  # republished with other pixels
    second = gdal_idem.warp(out, source, ledger=sqlite_ledger.dsn, **WARP)
    assert (first.outcome, second.outcome) == ("built", "rebuilt")
    assert second.key != first.key
    why = gdal_idem.Ledger(sqlite_ledger.dsn).explain(out)
    assert (why["a"]["key"], why["b"]["key"]) == (first.key, second.key)
    assert any("source" in d["path"].lower() and "sha256" in d["path"]
               for d in why["differences"]), why


def test_errors_are_exceptions_with_a_kind(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    link = tmp_path / "link.tif"
    link.symlink_to(tmp_path / "elsewhere.tif")
    with pytest.raises(gdal_idem.RefusedDestinationError) as refused:
        gdal_idem.warp(link, source, ledger=sqlite_ledger.dsn, **WARP)
    assert refused.value.kind == "refused_destination" and "link" in refused.value.message
    assert link.is_symlink() and not (tmp_path / "elsewhere.tif").exists()
    # A call that succeeded, then one GDAL fails before IDEM is called: the error, never the
    # previous call's result.
    gdal_idem.warp(out, source, ledger=sqlite_ledger.dsn, **WARP)
    with pytest.raises(gdal_idem.IdemError) as missing:
        gdal_idem.warp(out, str(tmp_path / "missing.tif"), ledger=sqlite_ledger.dsn, **WARP)
    assert missing.value.kind == "gdal" and "missing.tif" in missing.value.message
    with pytest.raises(gdal_idem.IdemError) as usage:
        gdal_idem.warp(out, source, ledger=sqlite_ledger.dsn, config={"IDEM_ON_BUSY": "NEVER"},
                       **WARP)
    assert usage.value.kind == "usage" and "IDEM_ON_BUSY" in usage.value.message
    with pytest.raises(ValueError):
        gdal_idem.warp(out, source, options="-of COG")
    with pytest.raises(TypeError):
        gdal_idem.warp(gdal.Open(source), source)


def test_busy_is_its_own_exception_and_the_ledger_shows_the_holder(ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    holder = PausedWorker(["gdalwarp", "-q", "-of", "IDEM", "-t_srs", "EPSG:3857", "-r",
                           "bilinear", source, f"/vsiidem/{out}"], env, "during_write", tmp_path)
    try:
        with pytest.raises(gdal_idem.BusyError) as busy:
            gdal_idem.warp(out, source, ledger=ledger.dsn, config={"IDEM_ON_BUSY": "FAIL"},
                           **WARP)
        assert busy.value.kind == "busy" and f"pid {holder.proc.pid}" in busy.value.message
        claims = gdal_idem.Ledger(ledger.dsn).inflight(all=True)["claims"]
        assert [c["worker"]["pid"] for c in claims] == [holder.proc.pid]
        assert claims[0]["key"] == busy.value.key
        code, _ = holder.resume()
        assert code == 0
    finally:
        holder.kill()
    assert gdal_idem.warp(out, source, ledger=ledger.dsn, **WARP).outcome == "skipped"


def test_the_ledger_answers_as_the_command_does(ledger, source, tmp_path):
    book = gdal_idem.Ledger(ledger.dsn)
    outs = [tmp_path / f"{n}.tif" for n in range(3)]
    results = [gdal_idem.translate(out, source, ledger=ledger.dsn, srcWin=[n * 8, 0, 8, 8])
               for n, out in enumerate(outs[:2])]
    status = book.status()
    assert (status["completed"], status["in_flight"], status["stale"]) == (2, 0, 0)
    assert book.inflight() == {"claims": [], "count": 0, "stale": 0}
    checked = book.verify()
    assert (checked["checked"], checked["ok"], checked["failed"]) == (2, 2, 0)
    commands = [f"gdal_translate -of IDEM -srcwin {n * 8} 0 8 8 {source} /vsiidem/{out}"
                for n, out in enumerate(outs)]
    assert book.pending(commands) == commands[2:]
    assert book.key(commands[0].split())["key"] == results[0].key


def test_the_ledgers_errors_have_the_kind_the_command_names(tmp_path):
    """gdal_idem.Ledger's errors come from the command's --json error object (docs/cli.md, "Exit
    codes"), not from the words of its message: a ledger that cannot be reached is a
    LedgerUnreachableError, one that is not there an IdemError of kind "usage"."""
    for book, kind in ((gdal_idem.Ledger("postgresql://etl:s3cret@127.0.0.1:1/ledger"),
                        "ledger_unreachable"),
                       (gdal_idem.Ledger(f"sqlite:{tmp_path}/none/ledger.sqlite"), "usage")):
        for call in (book.status, book.inflight):
            with pytest.raises(gdal_idem.IdemError) as error:
                call()
            assert error.value.kind == kind, error.value.message
            assert isinstance(error.value, gdal_idem.LedgerUnreachableError) == (
                kind == "ledger_unreachable")
            assert "s3cret" not in error.value.message


def test_threads_each_read_their_own_result(sqlite_ledger, source, tmp_path):
    """The RESULT domain is per thread: a thread pool (Dask's threads) gets each call's own."""
    found, errors = {}, []

    def tile(n):
        try:
            for _ in range(2):
                result = gdal_idem.translate(tmp_path / f"t{n}.tif", source,
                                             ledger=sqlite_ledger.dsn, srcWin=[n * 4, 0, 4, 4])
                found.setdefault(n, []).append((result.output, result.outcome))
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=tile, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert found == {n: [(str(tmp_path / f"t{n}.tif"), "built"),
                         (str(tmp_path / f"t{n}.tif"), "skipped")] for n in range(6)}


def test_work_key_is_the_key_of_the_call_and_writes_nothing(sqlite_ledger, source, tmp_path):
    out = tmp_path / "out.tif"
    key = gdal_idem.work_key("warp", out, source, **WARP)
    assert not out.exists() and sqlite_ledger.rows() == []
    assert gdal_idem.warp(out, source, ledger=sqlite_ledger.dsn, **WARP).key == key
    assert gdal_idem.work_key("translate", out, source, format="PNG") != key
    with pytest.raises(gdal_idem.IdemError) as missing:
        gdal_idem.work_key("warp", out, str(tmp_path / "missing.tif"), **WARP)
    assert "missing.tif" in missing.value.message
