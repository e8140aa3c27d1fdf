# SPDX-License-Identifier: MIT
"""What a failed or superseded attempt leaves behind (docs/concepts.md, "What a failed attempt
leaves"): GDAL's pre-delete of an IDEM destination is resolved by the IDEM call it belongs to,
never at the end of the process, so a worker that fails (busy, lost lease, error) leaves every
file and ledger row it found as it was; a publish removes the replaced output's files that the
new output lacks at once; a user's own delete through /vsiidem/ removes only the file it saw.

Workers stop at pause points and go on when the test creates their resume file; a lease's end
is awaited by polling the ledger."""

import json
import functools
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from idem_testlib import (GDAL_IDEM, Ledger, PausedWorker, env_with, file_state, make_ledger,
                          make_source, read_pixels, run, temp_dirs_beside,
                          wait_until_leases_expired)
from idem_testlib import warp_cmd as shared_warp_cmd

OB_TRAN = ("+proj=ob_tran +o_proj=longlat +o_lon_p=0 +o_lat_p=30 +lon_0=0 +datum=WGS84 "
           "+no_defs")


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger(request, tmp_path):
    return make_ledger(request.param, tmp_path)


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=384)


warp_cmd = functools.partial(shared_warp_cmd, quiet=True, through_vsiidem=True)


def completed_rows(ledger):
    return [r for r in ledger.rows() if r["completed_at"] is not None]


def test_safety_zombie_failure_keeps_the_successors_output(ledger, source, tmp_path):
    """A worker stopped past its lease while rebuilding over an older output, taken over and
    completed by another worker, then resumed: it fails, and the successor's output and row
    stay (the old exit-time delete removed both)."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out, resampling="near"), env=env, check=True)  # older completed work
    zombie = PausedWorker(warp_cmd(source, out), dict(env, IDEM_STALE_SECONDS="2"),
                          "during_write", tmp_path)
    try:
        wait_until_leases_expired(ledger)
        run(warp_cmd(source, out), env=env, check=True)  # the successor takes over
        successor = file_state(out)
        code, stderr = zombie.resume()
    finally:
        zombie.kill()
    assert code != 0
    assert "lost" in stderr
    assert file_state(out) == successor
    rows = {r["attempt"]: r for r in completed_rows(ledger) if "Bilinear" in r["work_json"]}
    assert list(rows) == [2] and rows[2]["output_size"] == successor[2]
    assert temp_dirs_beside(out) == []


def test_safety_busy_failing_neighbour_removes_nothing(ledger, source, tmp_path):
    """IDEM_ON_BUSY=FAIL next to a live worker: exit 1, and the older output, its row and the
    live worker's in-flight row are all still there; the live worker then publishes."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out, resampling="near"), env=env, check=True)
    older = file_state(out)
    rows_before = ledger.rows()
    live = PausedWorker(warp_cmd(source, out), env, "during_write", tmp_path)
    try:
        proc = run(warp_cmd(source, out), env=dict(env, IDEM_ON_BUSY="FAIL"))
        assert proc.returncode != 0
        assert "IDEM_ON_BUSY=FAIL" in proc.stderr
        assert file_state(out) == older
        rows = ledger.rows()
        assert len(rows) == 2
        in_flight = [r for r in rows if r["completed_at"] is None]
        assert len(in_flight) == 1 and in_flight[0]["worker_pid"] == live.proc.pid
        assert [r for r in rows if r["completed_at"] is not None] == rows_before
        code, stderr = live.resume()
    finally:
        live.kill()
    assert code == 0, stderr
    assert file_state(out) != older
    assert {r["attempt"] for r in completed_rows(ledger)} == {1}
    assert len(completed_rows(ledger)) == 2


def test_safety_python_worker_failure_resolves_the_pre_delete_at_once(ledger, source, tmp_path):
    """A long-running Python worker whose gdal.Warp failed busy sees the older output again at
    once through /vsiidem/, and it is still there, untouched, after the process ends."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out, resampling="near"), env=env, check=True)
    older = file_state(out)
    live = PausedWorker(warp_cmd(source, out), env, "during_write", tmp_path)
    code = textwrap.dedent(f"""
        import os
        from osgeo import gdal
        gdal.UseExceptions()
        gdal.SetConfigOption("IDEM_ON_BUSY", "FAIL")
        try:
            gdal.Warp({"/vsiidem/" + str(out)!r}, {source!r}, format="IDEM",
                      dstSRS="EPSG:3857", resampleAlg="bilinear")
            raise SystemExit("expected a busy failure")
        except RuntimeError as error:
            assert "IDEM_ON_BUSY=FAIL" in str(error), error
        assert gdal.VSIStatL({"/vsiidem/" + str(out)!r}) is not None, "still hidden"
        print("visible", os.stat({str(out)!r}).st_ino)
    """)
    try:
        proc = run([sys.executable, "-c", code], env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"visible {older[0]}" in proc.stdout
        assert file_state(out) == older
        assert len([r for r in ledger.rows() if r["completed_at"] is None]) == 1
    finally:
        live.resume()
        live.kill()


def test_safety_publish_removes_the_replaced_outputs_sidecar_at_once(ledger, source, tmp_path):
    """Work A writes out.tif + out.tif.aux.xml (a CRS GeoTIFF keys cannot hold); work B at the
    same path writes no sidecar. When B returns, A's sidecar is gone (in the same process), and
    a skip of B afterwards does not bring it back."""
    out = tmp_path / "out.tif"
    sidecar = tmp_path / "out.tif.aux.xml"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    code = textwrap.dedent(f"""
        import os
        from osgeo import gdal
        gdal.UseExceptions()
        dst, src = {"/vsiidem/" + str(out)!r}, {source!r}
        gdal.Warp(dst, src, format="IDEM", dstSRS={OB_TRAN!r})
        assert os.path.exists({str(sidecar)!r}), "work A wrote no sidecar"
        gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857")
        print("after B", os.path.exists({str(sidecar)!r}))
        gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857")  # a skip
        print("after skip", os.path.exists({str(sidecar)!r}))
        ds = gdal.Open({str(out)!r})
        print("crs", ds.GetSpatialRef().GetAuthorityCode(None))
    """)
    proc = run([sys.executable, "-c", code], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "after B False" in proc.stdout
    assert "after skip False" in proc.stdout
    assert "crs 3857" in proc.stdout
    assert not sidecar.exists()
    assert temp_dirs_beside(out) == []


def test_safety_skip_keeps_the_outputs_sidecar(ledger, source, tmp_path):
    """The rerun of work whose output has a sidecar skips and leaves both files untouched."""
    out = tmp_path / "out.tif"
    sidecar = tmp_path / "out.tif.aux.xml"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out, srs=OB_TRAN), env=env, check=True)
    before = (file_state(out), file_state(sidecar))
    run(warp_cmd(source, out, srs=OB_TRAN), env=env, check=True)
    assert (file_state(out), file_state(sidecar)) == before


def test_safety_users_delete_removes_only_the_file_it_saw(ledger, source, tmp_path):
    """gdal.Unlink through /vsiidem/ is carried out at the end of the process only if the file is
    still the one it saw: another worker's newer output written meanwhile stays, with its row."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out, resampling="near"), env=env, check=True)
    code = textwrap.dedent(f"""
        import subprocess, sys
        from osgeo import gdal
        gdal.UseExceptions()
        assert gdal.Unlink({"/vsiidem/" + str(out)!r}) == 0
        # Another worker rebuilds the path with other work before this process ends.
        subprocess.run({[str(c) for c in warp_cmd(source, out)]!r}, check=True)
    """)
    proc = run([sys.executable, "-c", code], env=env)
    assert proc.returncode == 0, proc.stderr
    assert out.exists(), "the deferred delete removed a file it never saw"
    rows = completed_rows(ledger)
    newer = [r for r in rows if "Bilinear" in r["work_json"]]
    assert len(newer) == 1 and newer[0]["output_size"] == out.stat().st_size


def test_safety_users_delete_of_an_unchanged_output_invalidates_its_row(ledger, source,
                                                                       tmp_path):
    """The same delete with nothing changed meanwhile removes the file and invalidates the row
    whose fingerprint is that file's, so the next run rebuilds it."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out), env=env, check=True)
    code = textwrap.dedent(f"""
        from osgeo import gdal
        gdal.UseExceptions()
        assert gdal.Unlink({"/vsiidem/" + str(out)!r}) == 0
    """)
    proc = run([sys.executable, "-c", code], env=env)
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()
    assert completed_rows(ledger) == []
    run(warp_cmd(source, out), env=env, check=True)
    assert out.exists() and len(completed_rows(ledger)) == 1


@pytest.mark.parametrize("output", ["/vsiidem/", "/vsiidem", "/vsiidem/sub/"])
def test_safety_directory_output_is_refused_before_a_claim(output, source, tmp_path):
    (tmp_path / "sub").mkdir()
    ledger = make_ledger("sqlite", tmp_path)
    cmd = ["gdal_translate", "-of", "IDEM", source, output]
    proc = run(cmd, env=env_with(IDEM_LEDGER=ledger.dsn), cwd=tmp_path)
    assert proc.returncode != 0
    assert "names a directory" in proc.stderr
    assert ledger.rows() == []


def test_safety_takeover_removes_the_dead_attempts_temporary_directory(ledger, source, tmp_path):
    """After kill -9 and a takeover, the killed attempt's .idem-tmp-* directory is gone as soon
    as the successor has claimed; a temporary directory without the work's mark stays (for
    `gdal-idem reap`)."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    foreign = tmp_path / ".idem-tmp-foreign"
    foreign.mkdir()
    dead = PausedWorker(warp_cmd(source, out), dict(env, IDEM_STALE_SECONDS="2"),
                        "during_write", tmp_path)
    dead.proc.kill()
    dead.proc.wait()
    assert len(temp_dirs_beside(out)) == 2
    ledger.end_leases()  # what the killed worker's lease running out would do
    run(warp_cmd(source, out), env=env, check=True)  # takes the killed attempt's work over
    assert temp_dirs_beside(out) == [foreign.name]
    rows = completed_rows(ledger)
    assert len(rows) == 1 and rows[0]["attempt"] == 2


def test_safety_export_onto_the_ledger_is_refused(source, tmp_path):
    """`gdal-idem export` never writes over the ledger database or its -wal file."""
    gpkg = tmp_path / "ledger.gpkg"
    ledger = Ledger("sqlite", "sqlite:" + str(gpkg), lambda: sqlite3.connect(str(gpkg)))
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, tmp_path / "out.tif"), env=env, check=True)
    rows = ledger.rows()
    for target in (gpkg, tmp_path / "ledger.gpkg-wal", tmp_path / "." / "ledger.gpkg"):
        before = gpkg.read_bytes()
        proc = run([GDAL_IDEM, "export", target], env=env)
        assert proc.returncode == 2, proc.stderr
        assert "of the ledger database" in proc.stderr or "is the ledger database" in proc.stderr
        assert gpkg.read_bytes() == before
    os.link(gpkg, tmp_path / "hardlink.gpkg")
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "export", tmp_path / "hardlink.gpkg"])
    assert proc.returncode == 2
    assert ledger.rows() == rows


UNPARSABLE_DSNS = [
    "postgresql://u:S3cretPW@[::1/ledger",
    "postgres://u@[::1/ledger?password=S3cretPW",
    "host=db password='S3cretPW",
    "host=[::1 password=S3cretPW",
    "password = S3cretPW port=notaport",
]


@pytest.mark.parametrize("dsn", UNPARSABLE_DSNS)
def test_safety_unparsable_dsn_never_prints_its_password(dsn, source, tmp_path):
    proc = run([GDAL_IDEM, "--ledger", dsn, "status"])
    assert proc.returncode == 2
    assert "S3cret" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("gdal-idem status: ")
    proc = run(warp_cmd(source, tmp_path / "out.tif"), env=env_with(IDEM_LEDGER=dsn))
    assert proc.returncode != 0
    assert "S3cret" not in proc.stderr + proc.stdout
    assert not (tmp_path / "out.tif").exists()


@pytest.mark.parametrize("command", [["status"], ["inflight"], ["verify"], ["reap"],
                                     ["explain", "--last", "/x.tif"], ["forget", "abc"],
                                     ["prune", "--keep-latest"], ["export", "x.gpkg"]])
def test_safety_read_only_commands_create_no_ledger(command, tmp_path):
    missing = tmp_path / "typo.sqlite"
    proc = run([GDAL_IDEM, "--ledger", "sqlite:" + str(missing), *command], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"there is no ledger at {missing}" in proc.stderr
    assert not missing.exists()
    assert not (tmp_path / "x.gpkg").exists()


def test_safety_global_options_follow_the_command_too(source, tmp_path):
    ledger = make_ledger("sqlite", tmp_path)
    run(warp_cmd(source, tmp_path / "out.tif"), env=env_with(IDEM_LEDGER=ledger.dsn),
        check=True)
    proc = run([GDAL_IDEM, "status", "--json", "--ledger", ledger.dsn, "-q"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed"] == 1


def test_safety_format_mem_is_refused(source, tmp_path):
    ledger = make_ledger("sqlite", tmp_path)
    proc = run(["gdal_translate", "-of", "IDEM", "-co", "FORMAT=MEM", source,
                "/vsiidem/" + str(tmp_path / "out.tif")], env=env_with(IDEM_LEDGER=ledger.dsn))
    assert proc.returncode != 0
    assert "FORMAT=MEM writes no file" in proc.stderr
    assert ledger.rows() == []


@pytest.mark.parametrize("how", ["same path", "hard link", "inside a VRT"])
def test_safety_output_that_is_a_source_is_refused(how, ledger, source, tmp_path):
    """The real destination is a file of the sources' file lists: refused before anything is
    deleted, the source untouched, no row."""
    before = file_state(source)
    src = source
    if how == "hard link":
        src = str(tmp_path / "alias.tif")
        os.link(source, src)
    elif how == "inside a VRT":
        src = str(tmp_path / "mosaic.vrt")
        run(["gdalbuildvrt", "-q", src, source], check=True)
    proc = run(warp_cmd(src, source), env=env_with(IDEM_LEDGER=ledger.dsn), cwd=tmp_path)
    assert proc.returncode != 0
    assert "is one of the sources" in proc.stderr
    assert file_state(source) == before
    assert ledger.rows() == []


PY_TRANSLATE_EDITED = r"""
import sys
from osgeo import gdal
gdal.UseExceptions()
src, dst, what = sys.argv[1:4]
ds = gdal.Open(src, gdal.GA_Update)
if what == "pixels":
    ds.GetRasterBand(1).Fill(77)                         # in GDAL's block cache only
else:
    ds.SetGeoTransform([400000.0, 20.0, 0.0, 4600000.0, 0.0, -20.0])  # not saved yet
options = {"outputType": gdal.GDT_Int16} if "vrt" in sys.argv[4:] else {}
out = gdal.Translate(dst, ds, format="IDEM", **options)
print("band1 max", int(out.GetRasterBand(1).ComputeRasterMinMax(False)[1]))
print("geotransform", list(out.GetGeoTransform()))
"""


@pytest.mark.parametrize("what", ["pixels", "geotransform"])
@pytest.mark.parametrize("path", ["source", "vrt"])
def test_safety_source_with_unwritten_changes_is_never_skipped_onto(what, path, tmp_path):
    """gdal.Translate of a dataset open for update whose changes are not written yet, to a path
    where the translation of the file as it was is completed: the output shows what the handle
    shows (77s, the new geotransform), as plain GDAL's does, never the old output."""
    source = make_source(tmp_path / "scene.tif", size=64, bands=1)
    ledger = make_ledger("sqlite", tmp_path)
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    out = tmp_path / "out.tif"
    extra = ["-ot", "Int16"] if path == "vrt" else []
    run(["gdal_translate", "-q", "-of", "IDEM", *extra, source, "/vsiidem/" + str(out)], env=env,
        check=True)
    proc = run([sys.executable, "-c", PY_TRANSLATE_EDITED, source, "/vsiidem/" + str(out), what,
                path], env=env)
    assert proc.returncode == 0, proc.stderr
    if what == "pixels":
        assert "band1 max 77" in proc.stdout
        assert int(read_pixels(out)[0].min()) == 77
    else:
        from osgeo import gdal
        assert list(gdal.Open(str(out)).GetGeoTransform()) == [400000.0, 20.0, 0.0, 4600000.0,
                                                                0.0, -20.0]
    assert len(completed_rows(ledger)) == 2


def png_cmd(src, dst):
    return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=PNG", "-t_srs",
            "EPSG:3857", "-ts", "64", "64", src, "/vsiidem/" + str(dst)]


def pending_lines(ledger, lines, tmp_path):
    batch = tmp_path / "batch.txt"
    batch.write_text("".join(__import__("shlex").join(line) + "\n" for line in lines))
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "pending", batch])
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("change", ["deleted", "edited", "deleted and added back different"])
def test_safety_a_changed_sidecar_is_never_skipped_onto(change, ledger, source, tmp_path):
    """FORMAT=PNG keeps the georeferencing in p.png.aux.xml. Whatever happens to that file after
    completion, the rerun rebuilds (the PNG is never served without its georeferencing), and
    `pending` and `verify` say so too."""
    out = tmp_path / "p.png"
    sidecar = tmp_path / "p.png.aux.xml"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(png_cmd(source, out), env=env, check=True)
    assert sidecar.exists()
    original = sidecar.read_bytes()
    if change == "deleted":
        sidecar.unlink()
    elif change == "edited":
        sidecar.write_bytes(original.replace(b"EPSG", b"epsg"))
    else:
        sidecar.unlink()
        sidecar.write_bytes(original + b"\n")
    assert pending_lines(ledger, [png_cmd(source, out)], tmp_path) != []
    verify = run([GDAL_IDEM, "--ledger", ledger.dsn, "verify", "--dry-run"])
    assert verify.returncode == 1
    run(png_cmd(source, out), env=env, check=True)
    assert sidecar.read_bytes() == original
    from osgeo import gdal
    assert gdal.Open(str(out)).GetSpatialRef().GetAuthorityCode(None) == "3857"
    assert [r["attempt"] for r in completed_rows(ledger)] == [2]
    assert pending_lines(ledger, [png_cmd(source, out)], tmp_path) == []


def test_safety_a_sidecar_added_after_completion_is_never_skipped_onto(ledger, source,
                                                                        tmp_path):
    """A GeoTIFF completed without a sidecar, then given an out.tif.aux.xml that GDAL reads (here
    another CRS): the rerun rebuilds, and the added file is gone with the old output."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp_cmd(source, out), env=env, check=True)
    before = file_state(out)
    from osgeo import gdal
    ds = gdal.Open(str(out))
    ds.SetMetadataItem("ADDED", "later")  # written to out.tif.aux.xml on close
    ds = None
    assert (tmp_path / "out.tif.aux.xml").exists()
    run(warp_cmd(source, out), env=env, check=True)
    assert not (tmp_path / "out.tif.aux.xml").exists()
    assert file_state(out) != before
    assert gdal.Open(str(out)).GetMetadataItem("ADDED") is None
    assert [r["attempt"] for r in completed_rows(ledger)] == [2]


def test_safety_rerun_with_untouched_sidecars_skips(ledger, source, tmp_path):
    out = tmp_path / "p.png"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(png_cmd(source, out), env=env, check=True)
    before = (file_state(out), file_state(tmp_path / "p.png.aux.xml"))
    run(png_cmd(source, out), env=env, check=True)
    assert (file_state(out), file_state(tmp_path / "p.png.aux.xml")) == before
    rows = completed_rows(ledger)
    assert [r["attempt"] for r in rows] == [1]
    assert "p.png.aux.xml" in rows[0]["output_members"]
    assert run([GDAL_IDEM, "--ledger", ledger.dsn, "verify"]).returncode == 0


def take_over_in_sql(ledger, pid):
    """What a takeover and completion by a worker on another host (which cannot reach this
    host's temporary directory) does to the row of `pid`'s claim: a new token and attempt, and
    a completion recorded under them."""
    table = "ledger" if ledger.backend == "sqlite" else "idem.ledger"
    mark = "?" if ledger.backend == "sqlite" else "%s"
    now = "(julianday('now') - 2440587.5) * 86400.0" if ledger.backend == "sqlite" else "now()"
    conn = ledger.connect()
    try:
        cur = conn.execute(f"UPDATE {table} SET claim_token = 'taken-over-elsewhere', "
                           f"attempt = attempt + 1, completed_at = {now}, output_size = 0 "
                           f"WHERE worker_pid = {mark} AND completed_at IS NULL", (pid,))
        assert cur.rowcount == 1
        conn.commit()
    finally:
        conn.close()


def test_safety_zombie_never_leaves_its_pixels_over_newer_work_of_another_key(ledger, source,
                                                                               tmp_path):
    """Worker A (work K1) stops right before publishing; its claim is taken over; worker C
    completes K2 (other work, same path); A resumes and publishes: its completion is refused,
    and C's file is back in place (the same inode), so the path holds what the ledger says."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    zombie = PausedWorker(warp_cmd(source, out), env, "before_commit", tmp_path)
    try:
        take_over_in_sql(ledger, zombie.proc.pid)
        run(warp_cmd(source, out, resampling="cubic"), env=env, check=True)  # C: K2
        newer = file_state(out)
        code, stderr = zombie.resume()
    finally:
        zombie.kill()
    assert code != 0
    assert "taken over by another worker" in stderr
    assert file_state(out) == newer
    cubic = [r for r in completed_rows(ledger) if "Cubic" in r["work_json"]]
    assert len(cubic) == 1 and cubic[0]["output_size"] == newer[2]
    before = file_state(out)
    run(warp_cmd(source, out, resampling="cubic"), env=env, check=True)  # skips: K2 is current
    assert file_state(out) == before
    assert temp_dirs_beside(out) == []


def test_safety_zombie_publishing_where_nothing_was_takes_its_file_back(ledger, source,
                                                                        tmp_path):
    """The same with nothing at the path before A publishes: A's file does not stay."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    zombie = PausedWorker(warp_cmd(source, out), env, "before_commit", tmp_path)
    try:
        take_over_in_sql(ledger, zombie.proc.pid)
        code, _ = zombie.resume()
    finally:
        zombie.kill()
    assert code != 0
    assert not out.exists()
    assert temp_dirs_beside(out) == []


def test_safety_two_works_on_one_output_are_serialised(ledger, source, tmp_path):
    """Work K2 for an output on which work K1, claimed first, still holds a live claim does not
    publish beside it: it waits for K1 before publishing (IDEM_ON_BUSY=WAIT), or fails without
    publishing, naming it (FAIL). Once K1 completes, K2 publishes, and its completion
    supersedes K1's."""
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    first = PausedWorker(warp_cmd(source, out), env, "during_write", tmp_path)
    try:
        proc = run(warp_cmd(source, out, resampling="cubic"),
                   env=dict(env, IDEM_ON_BUSY="FAIL"))
        assert proc.returncode != 0
        assert "other work" in proc.stderr and f"pid {first.proc.pid}" in proc.stderr
        assert not out.exists()
        # Its claim was given back, not left in flight.
        assert [r for r in ledger.rows() if r["completed_at"] is None and
                r["released_at"] is None and "Cubic" in r["work_json"]] == []
        second = subprocess.Popen([str(c) for c in warp_cmd(source, out, resampling="cubic")],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        for line in second.stderr:
            if "waiting for" in line:
                break
        assert not out.exists()  # the second work waits before publishing
        code, stderr = first.resume()
        assert code == 0, stderr
        assert second.wait(timeout=300) == 0
    finally:
        first.kill()
    rows = completed_rows(ledger)
    assert len(rows) == 2
    current = [r for r in rows if r["superseded_at"] is None]
    assert len(current) == 1 and "Cubic" in current[0]["work_json"]
    assert current[0]["output_size"] == out.stat().st_size
