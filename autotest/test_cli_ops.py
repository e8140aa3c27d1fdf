# SPDX-License-Identifier: MIT
"""gdal-idem's ledger operations (status, inflight, reap, verify, explain, forget, prune,
export) on ledgers produced by real gdalwarp runs through the built plugin, killed ones
included, against SQLite and PostgreSQL: human and --json output, exit codes, bad arguments."""

import json
import os
import re

import pytest

from osgeo import gdal, ogr

from idem_testlib import (GDAL_IDEM, env_with, ledger, make_source, run,  # noqa: F401
                          sqlite_ledger, temp_dirs_beside)
from idem_testlib import kill9, start_paused

ogr.UseExceptions()


def warp(src, dst, env, *extra):
    return run(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", *extra,
                src, "/vsiidem/" + str(dst)], env=env, check=True)


def idem(ledger, *args, env=None):
    return run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", *args], env=env)


def idem_json(ledger, *args, rc=0):
    proc = idem(ledger, "--json", *args)
    assert proc.returncode == rc, proc.stderr + proc.stdout
    return json.loads(proc.stdout)


def setup_tiles(ledger, tmp_path, count=2):
    src = make_source(tmp_path / "scene.tif", size=64)
    (tmp_path / "out").mkdir()
    env = env_with(IDEM_LEDGER=ledger.dsn)
    outs = []
    for i in range(count):
        out = tmp_path / "out" / f"t{i}.tif"
        warp(src, out, env, "-ts", str(32 + i), str(32 + i))
        outs.append(out)
    return src, env, outs


def kill_during_write(src, out, env):
    worker = start_paused(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857",
                           "-r", "cubic", src, "/vsiidem/" + str(out)],
                          dict(env, IDEM_STALE_SECONDS="2"), "during_write")
    kill9(worker)
    return worker.pid


def test_cli_status_counts_completed_superseded_stale(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path)
    warp(src, outs[0], env, "-ts", "32", "32", "-r", "bilinear")  # supersedes t0's first key
    kill_during_write(src, tmp_path / "out" / "dead.tif", env)
    ledger.end_leases()
    doc = idem_json(ledger, "status", rc=1)
    doc["ledger"] = "<ledger>"
    assert doc["oldest_in_flight_age_seconds"] > 0
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", doc["oldest_in_flight_claimed_at"])
    for volatile in ("oldest_in_flight_age_seconds", "oldest_in_flight_claimed_at"):
        doc[volatile] = "<time>"
    assert doc == {"backend": ledger.backend, "completed": 2, "completed_last_hour": 3,
                   "in_flight": 0, "layer": None, "ledger": "<ledger>", "namespace": None,
                   "oldest_in_flight_age_seconds": "<time>",
                   "oldest_in_flight_claimed_at": "<time>", "released": 0, "stale": 1,
                   "superseded": 1}
    human = idem(ledger, "status", "--namespace", "nope")
    assert human.returncode == 0 and "completed:  0" in human.stdout


def test_cli_inflight_and_reap_release_stale_claims_and_orphans(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=1)
    dead = tmp_path / "out" / "dead.tif"
    pid = kill_during_write(src, dead, env)
    assert temp_dirs_beside(dead)
    ledger.end_leases()
    listed = idem_json(ledger, "inflight", rc=1)
    assert listed["count"] == 1 and listed["stale"] == 1
    claim = listed["claims"][0]
    assert claim["worker"]["pid"] == pid and claim["output"] == str(dead)
    assert claim["state"] == "stale"
    dry = idem_json(ledger, "reap", "--dry-run", "--older-than", "0s", rc=1)
    assert dry["dry_run"] and len(dry["released"]) == 1 and len(dry["orphans"]) == 1
    assert temp_dirs_beside(dead)  # a dry run removes nothing
    proc = idem(ledger, "reap", "--older-than", "0", "--requeue")
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 1
    assert set(lines[0]) == {"layer", "namespace", "output_uri", "tile", "work", "work_key"}
    assert lines[0]["output_uri"] == str(dead) and lines[0]["namespace"] == "default"
    assert lines[0]["work"]["kind"] == "warp"
    assert not temp_dirs_beside(dead)
    assert [r for r in ledger.rows() if r["completed_at"] is None][0]["released_at"] is not None
    assert idem(ledger, "reap").returncode == 0  # nothing left
    # A released claim needs nothing: inflight and status agree with reap (exit 0, a monitoring
    # check on them goes green), and say it was released when asked for every claim.
    assert idem_json(ledger, "inflight") == {"claims": [], "count": 0, "stale": 0}
    [released] = idem_json(ledger, "inflight", "--all")["claims"]
    assert released["state"] == "released" and released["output"] == str(dead)
    status = idem_json(ledger, "status")
    assert status["stale"] == 0 and status["released"] == 1 and status["in_flight"] == 0
    assert status["oldest_in_flight_claimed_at"] is None
    # The requeued work completes.
    warp(src, dead, env, "-r", "cubic")
    assert idem_json(ledger, "inflight")["count"] == 0


def test_cli_reap_keeps_young_temp_dirs_and_live_claims(sqlite_ledger, tmp_path):
    src, env, outs = setup_tiles(sqlite_ledger, tmp_path, count=1)
    live = start_paused(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857",
                         "-r", "cubic", src, "/vsiidem/" + str(tmp_path / "out" / "live.tif")],
                        env, "during_write")
    try:
        doc = idem_json(sqlite_ledger, "reap", "--older-than", "0s")
        assert doc["released"] == [] and doc["orphans"] == []
        assert temp_dirs_beside(tmp_path / "out" / "live.tif")
        assert idem_json(sqlite_ledger, "inflight", "--all")["claims"][0]["state"] == "in_flight"
    finally:
        kill9(live)


def test_cli_reap_reads_claims_in_trouble_page_by_page(ledger, tmp_path):
    # Completed first attempts (out/), a claim killed mid-write (out/dead.tif), a claim killed
    # mid-write then taken over and completed (retaken/, attempt 2), and a planted orphan beside
    # completed first attempts only (quiet/): reap reads only the rows a killed worker can have
    # left a temporary directory beside, one row per page here; --all-dirs looks everywhere.
    src, env, outs = setup_tiles(ledger, tmp_path, count=3)
    dead = tmp_path / "out" / "dead.tif"
    kill_during_write(src, dead, env)
    (tmp_path / "retaken").mkdir()
    retaken = tmp_path / "retaken" / "t.tif"
    kill_during_write(src, retaken, env)
    (tmp_path / "quiet").mkdir()
    warp(src, tmp_path / "quiet" / "q.tif", env)
    planted = tmp_path / "quiet" / ".idem-tmp-planted"
    planted.mkdir()
    (planted / "q.tif").write_bytes(b"partial")
    ledger.end_leases()
    warp(src, retaken, env, "-r", "cubic")  # takes the expired claim over, completes
    assert [r["attempt"] for r in ledger.rows() if r["output_uri"] == str(retaken)] == [2]
    assert not temp_dirs_beside(retaken)  # the takeover removed the killed attempt's directory
    # One it cannot know (a worker of an older build, say) stays for reap.
    (retaken.parent / ".idem-tmp-older-build").mkdir()
    paged = env_with(IDEM_LEDGER_PAGE_ROWS="1")
    proc = idem(ledger, "--json", "reap", "--older-than", "0s", env=paged)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["output"] for r in doc["released"]] == [str(dead)]
    assert sorted(os.path.dirname(o["path"]) for o in doc["orphans"]) == sorted(
        [str(tmp_path / "out"), str(tmp_path / "retaken")])
    assert not temp_dirs_beside(dead) and not temp_dirs_beside(retaken)
    assert planted.exists()
    doc = json.loads(idem(ledger, "--json", "reap", "--older-than", "0s", "--all-dirs",
                          env=paged).stdout)
    assert doc["released"] == [] and [o["path"] for o in doc["orphans"]] == [str(planted)]
    assert not planted.exists()
    assert idem(ledger, "reap", "--all-dirs").returncode == 0  # nothing left


def test_cli_verify_removes_rows_of_truncated_and_deleted_outputs(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=3)
    assert idem_json(ledger, "verify")["failed"] == 0
    with open(outs[0], "r+b") as f:
        f.truncate(100)
    os.unlink(outs[1])
    doc = idem_json(ledger, "verify", rc=1)
    assert doc["checked"] == 3 and doc["failed"] == 2 and doc["ok"] == 1
    problems = {f["output"]: f for f in doc["failures"]}
    assert problems[str(outs[1])]["problem"] == "missing"
    assert problems[str(outs[0])]["problem"].startswith("size 100")
    assert all(f["row_removed"] for f in doc["failures"])
    assert {r["output_uri"] for r in ledger.rows()} == {str(outs[2])}
    assert os.path.exists(outs[0])  # the row goes, the file stays for the rerun
    checksum = idem_json(ledger, "verify", "--checksum")
    assert checksum["checksum_not_recorded"] == 1 and checksum["failed"] == 0
    # The next run redoes the work.
    warp(src, outs[1], env, "-ts", "33", "33")
    assert gdal.Open(str(outs[1])).RasterXSize == 33


def test_cli_verify_detects_a_wrong_grid(sqlite_ledger, tmp_path):
    src, env, outs = setup_tiles(sqlite_ledger, tmp_path, count=1)
    doc = idem_json(sqlite_ledger, "verify")
    assert doc["ok"] == 1
    st = os.stat(outs[0])
    gdal.Translate(str(tmp_path / "other.tif"), src, width=40, height=40)
    os.replace(tmp_path / "other.tif", outs[0])
    doc = idem_json(sqlite_ledger, "verify", rc=1)
    assert doc["failed"] == 1
    assert st.st_size > 0


def test_cli_verify_pages_through_more_rows_than_a_page(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=5)
    warp(src, outs[2], env, "-ts", "40", "40")  # supersedes t2's first key: not checked
    os.unlink(outs[0])
    with open(outs[4], "r+b") as f:
        f.truncate(100)
    one_page = idem_json(ledger, "verify", "--dry-run", rc=1)
    assert one_page["checked"] == 5 and one_page["failed"] == 2 and one_page["ok"] == 3
    for rows in ("1", "2", "3"):  # page boundaries everywhere, before and after failures
        paged = idem(ledger, "--json", "verify", "--dry-run",
                     env=env_with(IDEM_LEDGER_PAGE_ROWS=rows))
        assert paged.returncode == 1 and json.loads(paged.stdout) == one_page, rows
    # Human output: the FAIL lines, then the summary; the progress bar on stderr.
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "verify"],
               env=env_with(IDEM_LEDGER_PAGE_ROWS="2"))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "verified 5 completed output(s): 3 ok, 2 failed"
    assert all(line.startswith("FAIL ") and line.endswith(
        "row removed, the next run redoes the work") for line in lines[:2])
    assert {line.split()[2].rstrip(":") for line in lines[:2]} == {str(outs[0]), str(outs[4])}
    assert proc.stderr.endswith("100 - done.\n")
    assert idem_json(ledger, "verify")["checked"] == 3


def test_cli_explain_last_and_prefixes(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=1)
    warp(src, outs[0], env, "-ts", "32", "32", "-r", "cubic")
    doc = idem_json(ledger, "explain", "--last", str(outs[0]))
    assert doc["differences"] == [{"a": "NearestNeighbour", "b": "Cubic", "change": "changed",
                                   "path": "vrt.GDALWarpOptions.ResampleAlg"}]
    assert doc["a"]["state"] == "superseded" and doc["b"]["state"] == "completed"
    human = idem(ledger, "explain", doc["a"]["key"][:12], doc["b"]["key"][:12])
    assert human.returncode == 0
    assert "vrt.GDALWarpOptions.ResampleAlg: NearestNeighbour -> Cubic" in human.stdout
    # History counts: after pruning the superseded row, --last still finds both keys.
    assert idem(ledger, "prune", "--keep-latest").returncode == 0
    again = idem_json(ledger, "explain", "--last", "/vsiidem/" + str(outs[0]))
    assert again["differences"] == doc["differences"]
    unknown = idem(ledger, "explain", "0123456789ab", doc["b"]["key"])
    assert unknown.returncode == 2 and "unknown key '0123456789ab'" in unknown.stderr
    bad = idem(ledger, "explain", "not-a-key", "x")
    assert bad.returncode == 2 and "is not a key" in bad.stderr


def test_cli_forget_rows_first_then_outputs(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=3)
    (tmp_path / "out" / "t0.tif.aux.xml").write_text("<PAMDataset/>")
    doc = idem_json(ledger, "forget", "--output", str(outs[0]), "--delete-output")
    assert len(doc["forgotten"]) == 1
    deleted = set(doc["outputs"][0]["deleted"])
    # The output goes; a sidecar written after the completion was not recorded by it, so it
    # stays (docs/concepts.md, I1: only what IDEM made or recorded is deleted).
    assert deleted == {str(outs[0])}
    assert not outs[0].exists()
    assert (tmp_path / "out" / "t0.tif.aux.xml").read_text() == "<PAMDataset/>"
    key = [r["work_key"] for r in ledger.rows() if r["output_uri"] == str(outs[1])][0]
    proc = idem(ledger, "forget", key[:12])
    assert proc.returncode == 0 and f"forgot {key[:12]}" in proc.stdout
    assert outs[1].exists()  # without --delete-output the file stays
    assert len(idem_json(ledger, "forget", "--namespace", "default")["forgotten"]) == 1
    assert ledger.rows() == []
    assert idem(ledger, "forget", "abcdef").returncode == 2
    assert idem(ledger, "forget").returncode == 2


def test_cli_prune_refuses_during_a_run(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=1)
    warp(src, outs[0], env, "-ts", "32", "32", "-r", "cubic")
    live = start_paused(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857",
                         src, "/vsiidem/" + str(tmp_path / "out" / "live.tif")],
                        env, "during_write")
    try:
        refused = idem(ledger, "prune", "--keep-latest")
        assert refused.returncode == 1 and "in flight" in refused.stderr
        assert idem_json(ledger, "prune", "--keep-latest", "--force")["archived"] == 1
    finally:
        kill9(live)
    doc = idem_json(ledger, "prune", "--older-than", "7d", "--drop-history", "0s",
                    "--namespace", "other")
    assert doc == {"archived": 0, "history_dropped": 0, "in_flight": 0, "refused": False}
    assert idem_json(ledger, "prune", "--drop-history", "0s")["history_dropped"] == 1


def test_cli_export_one_feature_per_row_with_footprints(ledger, tmp_path):
    src, env, outs = setup_tiles(ledger, tmp_path, count=2)
    target = tmp_path / "ledger.gpkg"
    doc = idem_json(ledger, "export", str(target))
    assert doc["features"] == 2 and doc["without_footprint"] == 0
    ds = ogr.Open(str(target))
    layer = ds.GetLayer(0)
    assert layer.GetFeatureCount() == len(ledger.rows())
    assert layer.GetSpatialRef().GetAuthorityCode(None) == "4326"
    for feature in layer:
        raster = gdal.Open(feature.GetField("output_uri"))
        gt = raster.GetGeoTransform()
        cx = gt[0] + gt[1] * raster.RasterXSize / 2
        cy = gt[3] + gt[5] * raster.RasterYSize / 2
        from osgeo import osr
        wgs84 = osr.SpatialReference()
        wgs84.ImportFromEPSG(4326)
        wgs84.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
        lon, lat, _ = osr.CoordinateTransformation(raster.GetSpatialRef(),
                                                   wgs84).TransformPoint(cx, cy)
        centre = ogr.CreateGeometryFromWkt(f"POINT ({lon} {lat})")
        assert feature.GetField("state") == "completed"
        assert feature.GetGeometryRef().Contains(centre)


def test_cli_export_splits_footprints_at_the_antimeridian(sqlite_ledger, tmp_path):
    # UTM zone 60: x from 800 km to 864 km at 1 degree south spans 180 degrees of longitude.
    src = make_source(tmp_path / "dateline.tif", size=64, epsg=32760,
                      origin=(800000.0, 9900000.0), pixel=1000.0)
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    run(["gdalwarp", "-q", "-of", "IDEM", "-t_srs", "EPSG:32760", src,
         "/vsiidem/" + str(tmp_path / "dateline_out.tif")], env=env, check=True)
    target = tmp_path / "ledger.geojson"
    assert idem(sqlite_ledger, "export", str(target)).returncode == 0
    ds = ogr.Open(str(target))
    feature = ds.GetLayer(0).GetNextFeature()
    geometry = feature.GetGeometryRef()
    assert geometry.GetGeometryName() == "MULTIPOLYGON" and geometry.GetGeometryCount() == 2
    west, east = sorted((geometry.GetGeometryRef(i).GetEnvelope()
                         for i in range(2)), key=lambda e: e[0])
    assert west[0] >= -180 and west[1] < -179 + 1.5
    assert east[1] <= 180 and east[0] > 178
    assert abs(west[0] + 180) < 1e-9 and abs(east[1] - 180) < 1e-9


def test_cli_bad_arguments_give_clear_errors(sqlite_ledger, tmp_path):
    proc = idem(sqlite_ledger, "reap", "--older-than", "15 minutes")
    assert proc.returncode == 2 and "is not a duration" in proc.stderr
    proc = idem(sqlite_ledger, "prune", "--older-than", "-3d")
    assert proc.returncode == 2
    proc = idem(sqlite_ledger, "status", "--bogus")
    assert proc.returncode == 2 and "unknown argument '--bogus'" in proc.stderr
    proc = idem(sqlite_ledger, "export", str(tmp_path / "x.shp"))
    assert proc.returncode == 2 and ".gpkg" in proc.stderr
    # A ledger that cannot be reached now exits 3 (try again later), one that is not there 2.
    for dsn, code in (("postgresql://etl:hunter2@127.0.0.1:1/ledger", 3),
                      ("sqlite:/proc/nope/ledger.sqlite", 2)):
        proc = run([GDAL_IDEM, "--ledger", dsn, "status"])
        assert proc.returncode == code and proc.stderr.startswith("gdal-idem status: ")
        assert "hunter2" not in proc.stderr
        proc = run([GDAL_IDEM, "--ledger", dsn, "--json", "status"])
        assert proc.returncode == code and "hunter2" not in proc.stdout + proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert error["kind"] == ("ledger_unreachable" if code == 3 else "usage")
        assert error["message"] in proc.stderr


def test_cli_help_lists_every_option_of_every_command(sqlite_ledger):
    """`gdal-idem --help` names, for each command, every option that command's own usage line
    (printed on a bad argument) accepts."""
    help_text = run([GDAL_IDEM, "--help"]).stdout
    global_options = set(re.findall(r"--[a-z][a-z-]*", help_text[help_text.index("Global"):]))
    commands = ["init", "status", "inflight", "reap", "verify", "explain", "forget", "prune",
                "export", "pending", "load", "key"]
    for command in commands:
        proc = idem(sqlite_ledger, command, "--no-such-option")
        assert proc.returncode == 2, (command, proc.stderr)
        usage = proc.stderr[proc.stderr.index("usage: gdal-idem " + command):]
        usage = usage.split("\n\n")[0]
        # The command's entry in --help: its line and the indented lines that follow it.
        entry = re.search(r"^  " + command + r"\b.*(?:\n {4,}.*)*", help_text, re.M)
        assert entry, f"--help has no entry for {command}"
        options = set(re.findall(r"--[a-z][a-z-]*", usage)) - {"--no-such-option"}
        for option in options - global_options:
            assert option in entry.group(0), f"--help omits {option} of {command}: {usage}"


@pytest.mark.parametrize("command", ["init", "key", "status", "inflight", "reap", "verify",
                                     "explain", "forget", "prune", "export", "load", "pending"])
def test_cli_each_command_has_its_help(command):
    """`gdal-idem COMMAND --help` (and `gdal-idem help COMMAND`) print that command's usage and
    exit 0, whatever else is on the line and whether a ledger exists or not."""
    for words in ([command, "--help"], ["help", command], ["--json", command, "-h"]):
        proc = run([GDAL_IDEM, "--ledger", "sqlite:/nonexistent/ledger.sqlite", *words])
        assert proc.returncode == 0, (words, proc.stderr)
        assert proc.stdout.startswith("Usage: gdal-idem [GLOBAL OPTIONS] " + command)
        assert "Exit codes" in proc.stdout


def test_cli_a_mistyped_command_or_option_is_answered_with_the_nearest(sqlite_ledger):
    proc = run([GDAL_IDEM, "stauts"])
    assert proc.returncode == 2 and "did you mean status?" in proc.stderr
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "status", "--namspace", "x"])
    assert proc.returncode == 2 and "did you mean --namespace?" in proc.stderr
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "reap", "--older-thn", "1h"])
    assert proc.returncode == 2 and "did you mean --older-than?" in proc.stderr
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "status", "--zzzzzzzz"])
    assert proc.returncode == 2 and "did you mean" not in proc.stderr
    proc = run([GDAL_IDEM, "status", "--ledger"])  # a trailing --ledger, wherever it stands
    assert proc.returncode == 2 and "--ledger needs a DSN" in proc.stderr


def test_cli_reap_of_one_namespace_keeps_a_live_claim_of_another(sqlite_ledger, tmp_path):
    """reap --namespace A searches beside A's outputs but leaves the temporary directory of a
    live claim of namespace B there (its worker, on another host, holds no lock here): the live
    claims that protect a directory are those of every namespace of the ledger."""
    src, env, outs = setup_tiles(sqlite_ledger, tmp_path, count=1)
    out_dir = tmp_path / "out"

    def killed_during_write(name, namespace, lease):
        worker = start_paused(["gdalwarp", "-overwrite", "-of", "IDEM", "-co",
                               f"NAMESPACE={namespace}", "-t_srs", "EPSG:3857", "-r", "cubic",
                               src, "/vsiidem/" + str(out_dir / name)],
                              dict(env, IDEM_STALE_SECONDS=lease), "during_write")
        kill9(worker)  # its lock goes with it: only the ledger says the claim lives

    killed_during_write("a.tif", "A", "2")
    [a_dir] = temp_dirs_beside(out_dir / "a.tif")
    killed_during_write("b.tif", "B", "3600")
    [b_dir] = set(temp_dirs_beside(out_dir / "b.tif")) - {a_dir}
    sqlite_ledger.end_leases(where="namespace = 'A'")
    doc = idem_json(sqlite_ledger, "reap", "--namespace", "A", "--older-than", "0s", rc=1)
    assert [os.path.basename(o["path"]) for o in doc["orphans"]] == [a_dir]
    assert temp_dirs_beside(out_dir / "b.tif") == [b_dir], "a live claim's directory was removed"
