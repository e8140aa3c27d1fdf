# SPDX-License-Identifier: MIT
"""What the driver says goes through GDAL's error handler, never straight to stdout or stderr
(but the lines IDEM_VERBOSE asks for); a skip, the normal case of a rerun, is no warning; what a
call did is the driver's RESULT metadata, and what a dry run finds is returned as metadata
(docs/configuration.md, "What a run prints", "The result of a call"; docs/cli.md)."""

import json
import os
import subprocess

from idem_testlib import GDAL_IDEM, INSTALLED, env_with, make_source, run, sqlite_ledger  # noqa: F401

import pytest
from osgeo import gdal

PYTHON = "/usr/bin/python3"

# Warps `src` into `dst` through IDEM with osgeo.gdal, under a Python error handler that
# collects what GDAL reports; prints the collected messages as JSON on stdout.
CAPTURING_WARP = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
seen = []
def handler(severity, number, message):
    seen.append([severity, message])
gdal.PushErrorHandler(handler)
gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
print(json.dumps({"seen": seen, "result": gdal.GetDriverByName("IDEM").GetMetadata("RESULT")}))
"""

QUIET_WARP = """
import sys
from osgeo import gdal
gdal.UseExceptions()
gdal.PushErrorHandler("CPLQuietErrorHandler")
gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
"""

RASTERIO_COPY = """
import logging, sys
import rasterio, rasterio.shutil
logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="LOGGED %(message)s")
rasterio.shutil.copy(sys.argv[1], sys.argv[2], driver="IDEM")
"""

DRY_RUN_METADATA = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
gdal.PushErrorHandler("CPLQuietErrorHandler")
ds = gdal.Warp(sys.argv[2], sys.argv[1], format="IDEM", dstSRS="EPSG:3857")
gdal.PopErrorHandler()
print(json.dumps(ds.GetMetadata("IDEM")))
"""


def python(code, *args, env):
    return run([PYTHON, "-c", code, *args], env=env, check=True)


def run_twice(code, tmp_path, ledger):
    """Runs `code` on a new source and output, then again (a skip), as by default (no
    IDEM_VERBOSE): the output and both runs."""
    source = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_VERBOSE=None)
    first = python(code, source, f"/vsiidem/{out}", env=env)
    before = os.stat(out).st_mtime_ns
    again = python(code, source, f"/vsiidem/{out}", env=env)
    assert os.stat(out).st_mtime_ns == before
    assert [r["attempt"] for r in ledger.completed()] == [1]
    return out, first, again


def test_a_skip_is_no_warning_and_its_outcome_is_the_drivers_result(tmp_path, sqlite_ledger):
    out, first, again = run_twice(CAPTURING_WARP, tmp_path, sqlite_ledger)
    built, skipped = json.loads(first.stdout), json.loads(again.stdout)
    # Nothing reaches the error handler, and nothing is printed, on either run.
    assert built["seen"] == [] and skipped["seen"] == [], (built, skipped)
    assert first.stderr == "" and again.stderr == ""
    row = sqlite_ledger.completed()[0]
    assert built["result"]["OUTCOME"] == "BUILT"
    assert skipped["result"]["OUTCOME"] == "SKIPPED"
    for result in (built["result"], skipped["result"]):
        assert result["KEY"] == row["work_key"]
        assert result["ATTEMPT"] == "1"
        assert result["OUTPUT"] == str(out) == row["output_uri"]
        assert json.loads(result["FILES"]) == [str(out)]
        assert float(result["ELAPSED_MS"]) > 0 and float(result["KEY_MS"]) > 0
    assert float(built["result"]["WRITE_MS"]) > 0 and "WRITE_MS" not in skipped["result"]


def test_skip_is_silent_under_a_quiet_handler(tmp_path, sqlite_ledger):
    _, _, again = run_twice(QUIET_WARP, tmp_path, sqlite_ledger)
    assert again.stdout == "" and again.stderr == ""


def test_rasterio_logs_nothing_for_a_skip(tmp_path, sqlite_ledger):
    _, _, again = run_twice(RASTERIO_COPY, tmp_path, sqlite_ledger)
    assert [line for line in again.stdout.splitlines() if line.startswith("LOGGED ")] == []
    assert again.stderr == ""


def tile_commands(source, root, tiles, quiet):
    """gdalwarp commands of `tiles` tiles of 8 x 8 pixels cut from `source` (a 64 x 64 source of
    10 m pixels at the default origin) through IDEM, as a shell script: its path."""
    lines = []
    for n in range(tiles):
        x, y = 500000 + (n % 8) * 80, 4650000 - (n // 8) * 80
        lines.append(f"gdalwarp {'-q' if quiet else ''} -overwrite -of IDEM -co FORMAT=PNG -te {x} {y - 80} "
                     f"{x + 80} {y} -ts 8 8 {source} /vsiidem/{root}/{n}.png")
    script = root.parent / f"tiles-{'quiet' if quiet else 'loud'}.sh"
    script.write_text("set -e\n" + "\n".join(lines) + "\n")
    return str(script)


@pytest.mark.whole_only
def test_a_rerun_of_50_tiles_prints_no_warning(tmp_path, sqlite_ledger):
    """The done-when of the quiet skip: rerunning 50 tiles through gdalwarp prints no warning,
    and under -q nothing at all; with IDEM_VERBOSE=YES each says it skipped, on stderr."""
    source = make_source(tmp_path / "src.tif", size=64)
    root = tmp_path / "tiles"
    root.mkdir()
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_VERBOSE=None)
    run(["bash", tile_commands(source, root, 50, True)], env=env, check=True)
    assert len(sqlite_ledger.completed()) == 50
    before = sorted((p.name, p.stat().st_mtime_ns) for p in root.iterdir())
    loud = run(["bash", tile_commands(source, root, 50, False)], env=env, check=True)
    assert "Warning" not in loud.stderr and "IDEM" not in loud.stderr, loud.stderr
    quiet = run(["bash", tile_commands(source, root, 50, True)], env=env, check=True)
    assert quiet.stdout == "" and quiet.stderr == ""
    verbose = run(["bash", tile_commands(source, root, 50, True)],
                  env=dict(env, IDEM_VERBOSE="YES"), check=True)
    said = [line for line in verbose.stderr.splitlines() if line.startswith("IDEM: skipped ")]
    assert len(said) == 50 and "Warning" not in verbose.stderr, verbose.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in root.iterdir()) == before
    assert [r["attempt"] for r in sqlite_ledger.completed()] == [1] * 50


def translate_result(source, dst, env):
    """gdal.Translate of `source` into `dst` through IDEM in a new process: its exit code and the
    driver's RESULT metadata."""
    code = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
try:
    gdal.Translate(sys.argv[2], sys.argv[1], format="IDEM")
except RuntimeError:
    pass
print(json.dumps(gdal.GetDriverByName("IDEM").GetMetadata("RESULT")))
"""
    proc = run([PYTHON, "-c", code, source, dst], env=env, check=True)
    return json.loads(proc.stdout)


def test_the_result_names_what_was_replaced_and_why_a_call_failed(tmp_path, sqlite_ledger):
    source = make_source(tmp_path / "src.tif", size=64)
    other = make_source(tmp_path / "other.tif", size=64, seed=9)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    assert translate_result(source, f"/vsiidem/{out}", env)["OUTCOME"] == "BUILT"
    # Other work over the output: rebuilt. The output changed since its completion: rebuilt.
    assert translate_result(other, f"/vsiidem/{out}", env)["OUTCOME"] == "REBUILT"
    out.write_bytes(out.read_bytes() + b"x")
    result = translate_result(other, f"/vsiidem/{out}", env)
    assert result["OUTCOME"] == "REBUILT" and result["ATTEMPT"] == "2"
    # A link at the destination is refused before any claim.
    link = tmp_path / "link.tif"
    link.symlink_to(out)
    refused = translate_result(source, f"/vsiidem/{link}", env)
    assert (refused["OUTCOME"], refused["ERROR_KIND"]) == ("FAILED", "REFUSED_DESTINATION")
    assert "link" in refused["ERROR"] and not refused["ERROR"].startswith("IDEM:")
    assert "KEY" not in refused
    # A bad option: USAGE.
    usage = translate_result(source, f"/vsiidem/{tmp_path}/x.tif",
                             dict(env, IDEM_ON_BUSY="SOMETIMES"))
    assert (usage["OUTCOME"], usage["ERROR_KIND"]) == ("FAILED", "USAGE"), usage
    assert link.is_symlink() and not (tmp_path / "x.tif").exists()


def test_verbose_says_what_each_call_did_on_stderr(tmp_path, sqlite_ledger):
    source = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_VERBOSE=None)
    cmd = ["gdal_translate", "-q", "-of", "IDEM", source, f"/vsiidem/{out}"]
    assert run(cmd, env=env, check=True).stderr == ""
    verbose = run(cmd[:1] + ["--config", "IDEM_VERBOSE", "YES"] + cmd[1:], env=env, check=True)
    key = sqlite_ledger.completed()[0]["work_key"]
    assert verbose.stderr == (f"IDEM: skipped {out}: already completed (key {key[:12]}, "
                              "attempt 1)\n")
    out.unlink()
    rebuilt = run(cmd, env=dict(env, IDEM_VERBOSE="YES"), check=True)
    assert f"IDEM: rebuilt {out} (key {key[:12]}, attempt 2)" in rebuilt.stderr.splitlines()


MOSAIC_CALLS = """
import json, sys
from osgeo import gdal
gdal.UseExceptions()
seen = {}
for name in ("warp", "translate"):
    seen[name] = []
    gdal.PushErrorHandler(lambda severity, number, message: seen[name].append(message))
    out = sys.argv[2] + "." + name + ".tif"
    if name == "warp":
        gdal.Warp(out, sys.argv[1].split(","), format="IDEM")
    else:
        gdal.Translate(out, gdal.BuildVRT("", sys.argv[1].split(",")), format="IDEM")
    gdal.PopErrorHandler()
print(json.dumps(seen))
"""


def test_a_plain_mosaic_from_gdal_warp_is_said_to_lack_the_warps_options(tmp_path, sqlite_ledger):
    """gdal.Warp hands IDEM a plain mosaic as gdalbuildvrt's VRT, without the warp's options
    (docs/keys.md, "Known differences"): a warning says so. gdal.Translate of such a VRT is the
    VRT's copy, as IDEM writes it: no warning."""
    a = make_source(tmp_path / "a.tif", size=64)
    b = make_source(tmp_path / "b.tif", size=64, origin=(500640.0, 4650000.0), seed=5)
    proc = python(MOSAIC_CALLS, f"{a},{b}", f"/vsiidem/{tmp_path}/out",
                  env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    seen = json.loads(proc.stdout)
    assert [m for m in seen["warp"] if "gdalbuildvrt's VRT" in m], seen
    assert seen["translate"] == [], seen
    assert len(sqlite_ledger.completed()) == 2


def test_dry_run_returns_its_report_as_metadata(tmp_path, sqlite_ledger):
    source = make_source(tmp_path / "src.tif", size=64)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn, IDEM_DRY_RUN="YES")
    proc = python(DRY_RUN_METADATA, source, f"/vsiidem/{out}", env=env)
    report = json.loads(proc.stdout)
    assert set(report) == {"KEY", "WORK", "DESTINATION"}
    assert report["DESTINATION"] == str(out)
    work = json.loads(report["WORK"])
    assert work["destination"] == str(out)
    # The key the CLI derives, from the same metadata, is the same.
    key = run([GDAL_IDEM, "key", "--json", "--", "gdalwarp", "-of", "IDEM", "-t_srs",
               "EPSG:3857", source, f"/vsiidem/{out}"], env=env, check=True)
    assert json.loads(key.stdout)["key"] == report["KEY"]
    assert json.loads(key.stdout)["work"] == work
    assert "IDEM dry run" not in key.stderr  # the command's result, not a warning
    assert not out.exists()
    assert sqlite_ledger.completed() == []


@pytest.mark.skipif(INSTALLED, reason="the installed plugin is in GDAL's own directory")
def test_cli_without_the_plugin_names_where_gdal_looked(tmp_path):
    source = make_source(tmp_path / "src.tif", size=64)
    empty = tmp_path / "no-plugins"
    empty.mkdir()
    proc = run([GDAL_IDEM, "key", "--", "gdalwarp", "-of", "IDEM", "-t_srs", "EPSG:3857", source,
                f"/vsiidem/{tmp_path}/out.tif"], env=env_with(GDAL_DRIVER_PATH=empty))
    assert proc.returncode == 2, proc.stderr
    assert f"GDAL_DRIVER_PATH={empty}" in proc.stderr
    assert "gdal_IDEM.so" in proc.stderr
    assert proc.stdout == ""



# Bad input: (what the command adds to a gdal_translate through IDEM, a part of the message that
# names what is wrong, a part that says what to do).
BAD_INPUTS = [
    (["-co", "FORMAT=MEM"], "FORMAT=MEM writes no file", "name a driver that writes one"),
    (["-co", "FORMAT=IDEM"], "wrap IDEM in itself", "name the real output driver"),
    (["-co", "FORMAT=NoSuchDriver"], "FORMAT=NoSuchDriver", "gdalinfo --formats"),
    (["-co", "FORMAT=CEOS"], "FORMAT=CEOS cannot write files", "lists as writable"),
    (["-co", "NOEQUALS"], "'NOEQUALS' is not NAME=VALUE", "write it as -co NAME=VALUE"),
    (["-co", "FORMAT=GTiff", "-co", "TILED=YES", "-co", "TILED=NO"], "given twice",
     "give it once"),
    (["-co", "FORMAT=GTiff", "-co", "NAMESPACE="], "the namespace is empty",
     "set NAMESPACE or IDEM_NAMESPACE"),
    (["-co", "FORMAT=GTiff", "-co", "TILE=3/9/0"], "TILE=3/9/0 is not a tile index",
     "write it as z/x/y"),
    (["-co", "FORMAT=GTiff", "--config", "IDEM_ON_BUSY", "SOMETIMES"],
     "IDEM_ON_BUSY=SOMETIMES is not valid", "use WAIT (the default) or FAIL"),
    (["-co", "FORMAT=GTiff", "--config", "IDEM_STALE_SECONDS", "1"],
     "IDEM_STALE_SECONDS=1 is not a lease length", "give whole seconds, at least 2"),
]


@pytest.mark.parametrize("extra,wrong,fix", BAD_INPUTS,
                         ids=[" ".join(case[0]) for case in BAD_INPUTS])
def test_bad_input_names_what_is_wrong_and_what_to_do(tmp_path, sqlite_ledger, extra, wrong,
                                                      fix):
    """Each bad input fails before any work: exit non-zero, a GDAL error (not a warning) saying
    what is wrong and what to do, no output, no temporary file and no ledger row."""
    source = make_source(tmp_path / "src.tif", size=32)
    out = tmp_path / "out" / "x.tif"
    out.parent.mkdir()
    proc = run(["gdal_translate", "-q", "-of", "IDEM", *extra, source, f"/vsiidem/{out}"],
               env=env_with(IDEM_LEDGER=sqlite_ledger.dsn))
    assert proc.returncode != 0, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert any(wrong in line and fix in line for line in errors), proc.stderr
    assert "IDEM_INTERNAL" not in proc.stderr and "::" not in proc.stderr
    assert os.listdir(out.parent) == []
    assert sqlite_ledger.rows() == []
