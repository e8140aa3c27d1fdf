# SPDX-License-Identifier: MIT
"""`gdal-idem pending`: the lines of a batch of gdalwarp / gdal_translate commands whose work is
not done, decided in one process by the key and the driver's own skip check, against SQLite and
PostgreSQL ledgers filled by real gdalwarp runs through the built plugin. A line that cannot be
parsed or keyed is printed with a warning: a batch filtered by `pending` never loses work."""

import os
import shlex
import subprocess

import pytest

from idem_testlib import (GDAL_IDEM, env_with, file_state, ledger, make_source,  # noqa: F401
                          run, sqlite_ledger)
from idem_testlib import kill9, start_paused

TILES = 8


def tile_command(src, out, size, *extra):
    """One batch line, shell-quoted as a user writes it."""
    return shlex.join(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857",
                       "-r", "bilinear", *extra, "-ts", str(size), str(size), str(src),
                       "/vsiidem/" + str(out)])


@pytest.fixture
def batch(tmp_path):
    """A source, an output directory and TILES command lines, one output each."""
    src = make_source(tmp_path / "scene.tif", size=96)
    (tmp_path / "out").mkdir()
    lines = [tile_command(src, tmp_path / "out" / f"t{i}.tif", 16 + i) for i in range(TILES)]
    return src, lines


def write_batch(tmp_path, lines, name="batch.txt"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def run_line(line, env):
    """A batch line as the batch runs it: through the shell."""
    proc = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{line}\n{proc.stderr}"
    return proc


def pending(env, *args, stdin=None, cwd=None):
    proc = subprocess.run([GDAL_IDEM, "pending", *[str(a) for a in args]], env=env, cwd=cwd,
                          input=stdin, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def printed(proc):
    return proc.stdout.splitlines()


def test_pending_prints_exactly_the_lines_not_done(ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    done, left = lines[::2], lines[1::2]
    for line in done:
        run_line(line, env)
    proc = pending(env, "--count", write_batch(tmp_path, lines))
    assert printed(proc) == left
    assert f"{len(done)} done, {len(left)} pending, 0 unparsed" in proc.stderr
    # The filtered lines are exactly those the driver skips; the printed ones do work.
    for line in done:
        assert "IDEM: skipped" in run_line(line, env).stderr
    assert "IDEM: skipped" not in run_line(left[0], env).stderr


def test_pending_reads_stdin(sqlite_ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run_line(lines[0], env)
    text = "".join(line + "\n" for line in lines)
    assert printed(pending(env, stdin=text)) == lines[1:]
    assert printed(pending(env, "-", stdin=text)) == lines[1:]
    proc = subprocess.run([GDAL_IDEM, "--json", "pending", "--count"], env=env, input=text,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and printed(proc) == lines[1:]
    assert proc.stderr.strip().splitlines()[-1] == \
        f'{{"done":1,"pending":{len(lines) - 1},"unparsed":0}}'


def test_pending_prints_a_done_line_again_when_its_output_is_gone_or_changed(ledger, batch,
                                                                             tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    for line in lines[:3]:
        run_line(line, env)
    path = write_batch(tmp_path, lines[:3])
    assert printed(pending(env, path)) == []
    os.unlink(tmp_path / "out" / "t0.tif")
    os.utime(tmp_path / "out" / "t2.tif", ns=(1_000_000_000, 1_000_000_000))
    assert printed(pending(env, path)) == [lines[0], lines[2]]


def test_pending_prints_a_line_whose_options_changed(ledger, batch, tmp_path):
    src, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    for line in lines[:2]:
        run_line(line, env)
    cubic = lines[1].replace("bilinear", "cubic")
    nodata = tile_command(src, tmp_path / "out" / "t0.tif", 16, "-dstnodata", "0")
    assert printed(pending(env, write_batch(tmp_path, [lines[0], cubic, nodata, lines[1]]))) == \
        [cubic, nodata]


def test_pending_prints_the_line_whose_output_a_later_command_rewrote(ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    cubic = lines[0].replace("bilinear", "cubic")
    run_line(lines[0], env)
    run_line(cubic, env)  # same output, other work: the bilinear completion is superseded
    assert printed(pending(env, write_batch(tmp_path, [lines[0], cubic]))) == [lines[0]]


def test_pending_prints_work_a_killed_worker_left_unfinished(ledger, batch, tmp_path):
    src, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    run_line(lines[0], env)
    out = tmp_path / "out" / "t1.tif"
    # Killed after the rename, before completion: the output is whole, the work not done.
    worker = start_paused(shlex.split(lines[1]), env, "before_complete")
    kill9(worker)
    assert out.exists()
    assert printed(pending(env, write_batch(tmp_path, lines[:2]))) == [lines[1]]


def test_pending_passes_unparseable_lines_through_with_a_warning(sqlite_ledger, batch, tmp_path):
    src, lines = batch
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run_line(lines[0], env)
    odd = [
        lines[0] + " 'unterminated",                                      # 2
        lines[0].replace(str(src), "$SCENE"),                             # 3
        lines[0].replace("-of IDEM", "-of GTiff").replace("/vsiidem/", ""),  # 4
        lines[0].replace(str(src), str(tmp_path / "missing.tif")),        # 5
        "gdalwarp --version",                                             # 6
        "gdalinfo " + str(src),                                           # 7
        lines[0] + " && echo done",                                       # 8
        "gdalwarp -q -of IDEM -t_srs",                                    # 9
    ]
    proc = pending(env, "--count", write_batch(tmp_path, [lines[0]] + odd))
    assert printed(proc) == odd
    for number in range(2, 10):
        assert f"line {number}: passed through: " in proc.stderr, proc.stderr
    assert "line 1:" not in proc.stderr
    assert "missing.tif" in proc.stderr
    assert "1 done, 0 pending, 8 unparsed" in proc.stderr


def test_pending_skips_blank_lines_and_comments_and_joins_continuations(sqlite_ledger, batch,
                                                                        tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run_line(lines[0], env)
    words = shlex.split(lines[1])
    continued = shlex.join(words[:-2]) + " \\\n    " + shlex.join(words[-2:]) + " 2>>errors.log"
    text = f"# the batch\n\n{lines[0]}  # done already\n{continued}\n"
    proc = pending(env, "--count", stdin=text)
    assert proc.stdout == continued + "\n"
    assert "1 done, 1 pending, 0 unparsed" in proc.stderr
    assert "passed through" not in proc.stderr


def test_pending_uses_the_ledger_and_namespace_each_line_runs_with(sqlite_ledger, batch, tmp_path):
    _, lines = batch
    other = "sqlite:" + str(tmp_path / "other.sqlite")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run_line(lines[0], env_with(IDEM_LEDGER=other))
    run_line(lines[1], env_with(IDEM_LEDGER=other, IDEM_NAMESPACE="night"))
    with_config = lines[0].replace("gdalwarp ", f"gdalwarp --config IDEM_LEDGER {other} ", 1)
    assigned = f"IDEM_LEDGER={other} IDEM_NAMESPACE=night {lines[1]}"
    batch_lines = [lines[0], with_config, assigned, f"IDEM_LEDGER={other} {lines[1]}", lines[0]]
    # A line's --config or assignment holds for that line only, not for the lines after it.
    assert printed(pending(env, write_batch(tmp_path, batch_lines))) == \
        [lines[0], f"IDEM_LEDGER={other} {lines[1]}", lines[0]]
    # --ledger stands for the IDEM_LEDGER the batch runs with.
    proc = run([GDAL_IDEM, "--ledger", other, "pending", write_batch(tmp_path, lines[:2])],
               env=env_with(IDEM_LEDGER=None))
    assert printed(proc) == [lines[1]]


def test_pending_leaves_outputs_sidecars_and_rows_untouched(ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    run_line(lines[0], env)
    out = tmp_path / "out" / "t0.tif"
    sidecar = tmp_path / "out" / "t0.tif.aux.xml"
    sidecar.write_text("<PAMDataset><Metadata><MDI key=\"note\">kept</MDI></Metadata>"
                       "</PAMDataset>\n")
    before = file_state(out), file_state(sidecar), len(ledger.completed())
    # A sidecar that joined the output after its completion makes the work pending (the driver
    # would rebuild rather than serve an output whose files changed), and pending changes nothing.
    assert printed(pending(env, write_batch(tmp_path, [lines[0]]))) == [lines[0]]
    assert (file_state(out), file_state(sidecar), len(ledger.completed())) == before
    sidecar.unlink()
    assert printed(pending(env, write_batch(tmp_path, [lines[0]]))) == []


def test_pending_gdal_translate_lines(sqlite_ledger, batch, tmp_path):
    src, _ = batch
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    half = shlex.join(["gdal_translate", "-q", "-of", "IDEM", "-outsize", "50%", "50%", src,
                       "/vsiidem/" + str(tmp_path / "out" / "half name.tif")])
    third = half.replace("50%", "33%").replace("half name", "third")
    run_line(half, env)
    assert printed(pending(env, write_batch(tmp_path, [half, third]))) == [third]


def test_pending_then_xargs_completes_the_batch(ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=ledger.dsn)
    for line in lines[:TILES // 2]:
        run_line(line, env)
    path = write_batch(tmp_path, lines)
    # The recipe of docs/recipes.md.
    proc = subprocess.run(
        f"{shlex.quote(GDAL_IDEM)} pending {shlex.quote(str(path))} | "
        "xargs -d '\\n' -P 2 -I{} sh -c '{}'",
        shell=True, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("IDEM: skipped") == 0  # only undone work was run
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"t{i}.tif" for i in range(TILES))
    assert len(ledger.completed()) == TILES
    second = pending(env, "--count", path)
    assert second.stdout == ""
    assert f"{TILES} done, 0 pending, 0 unparsed" in second.stderr


def test_pending_null_separated_for_xargs_0(sqlite_ledger, batch, tmp_path):
    _, lines = batch
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run_line(lines[0], env)
    records = lines[:3] + [lines[0] + " 'unterminated"]
    path = tmp_path / "batch.bin"
    path.write_bytes(b"".join(r.encode() + b"\0" for r in records))
    proc = pending(env, "--null", path)
    assert proc.stdout.split("\0") == lines[1:3] + [records[3], ""]
    assert "record 4: passed through" in proc.stderr
    ran = subprocess.run(f"{shlex.quote(GDAL_IDEM)} pending --null {shlex.quote(str(path))} | "
                         "head -z -n 2 | xargs -0 -n 1 -P 2 sh -c",
                         shell=True, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert pending(env, "--null", path).stdout.split("\0") == [records[3], ""]


def test_pending_usage_errors(sqlite_ledger, tmp_path):
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    for args in (["--bogus"], [tmp_path / "nope.txt"], ["a.txt", "b.txt"]):
        proc = run([GDAL_IDEM, "pending", *args], env=env)
        assert proc.returncode == 2, args
        assert proc.stdout == ""
        assert "gdal-idem pending:" in proc.stderr
