#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Pyramid (issue 46): one level of XYZ PNG tiles (256x256, bilinear, alpha) made four ways, each
a whole command timed from outside (process start, GDAL's registration, the pool's start):

  - plain `gdal.Warp` in a 2-process spawned `multiprocessing.Pool` (no resume: it redoes all),
  - the same pool writing through IDEM (SQLite ledger, durable),
  - `gdal2tiles.py --processes=2`,
  - `gdal raster tile -j 2` (GDAL 3.11 and later),

uninterrupted, killed (the whole process group, SIGKILL) once half of the level's tiles exist and
then resumed (`--resume` for the tilers, the same command for the pools), and rerun over the
finished level. After a resume every tile is checked against the tool's own uninterrupted level
(checksums): a tile the kill cut short and a resume kept shows there.

Writes the `pyramid` section of bench/RESULTS.md. `gdal raster tile` exists from GDAL 3.11: run
on Debian 12 (GDAL 3.6) its rows say so; bench/pyramid.sh runs this script in the Debian testing
chroot (GDAL 3.13), where the goals are measured. Knobs: IDEM_BENCH_PYRAMID_TILES (about 484
zoom-14 tiles), IDEM_BENCH_PYRAMID_ROUNDS (3)."""

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import idem_bench as B  # noqa: E402
from osgeo import gdal  # noqa: E402
from pool_bench import _init_worker, _warp_tile  # noqa: E402  (the same tile as section 9)

TILES = int(os.environ.get("IDEM_BENCH_PYRAMID_TILES", "484"))
ROUNDS = int(os.environ.get("IDEM_BENCH_PYRAMID_ROUNDS", "3"))
ZOOM = 14
STALE_SECONDS = 2  # the lease in the killed + resumed runs
TOOLS = ["plain pool", "IDEM pool", "gdal2tiles.py", "gdal raster tile",
         "gdal raster tile to /vsiidem/"]
TILERS_3_11 = ("gdal raster tile", "gdal raster tile to /vsiidem/")


# ------------------------------------------------------------------------------------------
# The pools (run as `pyramid_bench.py pool SRC OUT plain|idem`, so that they are timed and
# killed as whole commands, like the tilers)


def _nothing(_):
    return None


def pool_command(src, out, mode):
    if mode == "start":  # the pool's own start: 2 spawned workers importing GDAL, no tile
        with multiprocessing.get_context("spawn").Pool(2, initializer=_init_worker) as pool:
            pool.map(_nothing, range(2), chunksize=1)
        return
    jobs = []
    for z, x, y, bounds in B.tiles_of(src, ZOOM):
        folder = os.path.join(out, str(z), str(x))
        os.makedirs(folder, exist_ok=True)
        jobs.append((src, os.path.join(folder, f"{y}.png"), bounds, mode == "idem"))
    with multiprocessing.get_context("spawn").Pool(2, initializer=_init_worker) as pool:
        pool.map(_warp_tile, jobs, chunksize=4)


# ------------------------------------------------------------------------------------------
# The harness


def raster_tile_available():
    if shutil.which("gdal") is None:
        return False
    proc = subprocess.run(["gdal", "raster", "tile", "--help"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return proc.returncode == 0


def command(tool, src, out, resume=False):
    if tool in ("plain pool", "IDEM pool"):
        mode = "idem" if tool == "IDEM pool" else "plain"
        return [sys.executable, os.path.abspath(__file__), "pool", src, out, mode]
    if tool == "gdal2tiles.py":
        return (["gdal2tiles.py", "--xyz", "-z", str(ZOOM), "-r", "bilinear", "-w", "none",
                 "--processes=2", "-q"] + (["--resume"] if resume else []) + [src, out])
    # To /vsiidem/: GDAL's PNG driver writes each tile through /vsiidem/, which publishes it
    # whole on close (no ledger, no key: --resume still decides by the file's existence).
    target = "/vsiidem/" + out if tool == "gdal raster tile to /vsiidem/" else out
    return (["gdal", "raster", "tile", "-q", "-j", "2", "--min-zoom", str(ZOOM), "--max-zoom",
             str(ZOOM), "-r", "bilinear", "--webviewer", "none"] +
            (["--resume"] if resume else []) + [src, target])


def run(tool, src, out, env, resume=False, kill_at=None):
    """(seconds, killed) of one command; killed once `kill_at` PNG tiles exist under `out`."""
    start = time.perf_counter()
    proc = subprocess.Popen(command(tool, src, out, resume), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    return B._watch(proc, start, kill_at, lambda: B.count_files(out, ".png"))


def fresh(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def measure(src, tools, expected):
    """{tool: {"new": [...], "killed": [...], "resumed": [...], "rerun": [...],
    "tiles": n, "damaged": [...]}} over ROUNDS rounds, the tools interleaved."""
    results = {t: {"new": [], "killed": [], "resumed": [], "rerun": [], "tiles": 0,
                   "damaged": []} for t in tools}
    base = os.path.join(B.WORK, "pyramid")
    for _ in range(ROUNDS):
        for tool in tools:
            work = fresh(os.path.join(base, "run"))
            env = B.env_with(IDEM_LEDGER="sqlite:" + os.path.join(work, "ledger.sqlite"),
                             IDEM_VERBOSE=None)
            out = os.path.join(work, "level")
            B.drop_caches_dirty()
            results[tool]["new"].append(run(tool, src, out, env)[0])
            names = B.tree_files(out, ".png")
            results[tool]["tiles"] = len(names)
            reference = B.reference_checksums(out, names)
            B.drop_caches_dirty()
            results[tool]["rerun"].append(run(tool, src, out, env, resume=True)[0])
            # Killed halfway, then resumed, on a fresh level and ledger.
            work = fresh(os.path.join(base, "run"))
            # The kill leaves the claims of the tiles in flight leased: the resume waits them
            # out (with IDEM_ON_BUSY=WAIT, the default), so the lease is short here.
            env.update(IDEM_LEDGER="sqlite:" + os.path.join(work, "ledger.sqlite"),
                       IDEM_STALE_SECONDS=str(STALE_SECONDS))
            out = os.path.join(work, "level")
            B.drop_caches_dirty()
            seconds, killed = run(tool, src, out, env, kill_at=expected // 2)
            if not killed:
                raise RuntimeError(f"{tool} ended before half of its tiles existed")
            results[tool]["killed"].append(seconds)
            results[tool]["resumed"].append(run(tool, src, out, env, resume=True)[0])
            ok, damaged, missing = B.audit(out, reference, names)
            results[tool]["damaged"].append(damaged + missing)
    shutil.rmtree(base, ignore_errors=True)
    return results


def raster_tile_with_idem(src):
    """What `gdal raster tile -f IDEM` does today (its first error line), or None if it works."""
    work = fresh(os.path.join(B.WORK, "pyramid-idem-format"))
    env = B.env_with(IDEM_LEDGER="sqlite:" + os.path.join(work, "ledger.sqlite"))
    proc = subprocess.run(["gdal", "raster", "tile", "-q", "-j", "2", "--min-zoom", str(ZOOM),
                           "--max-zoom", str(ZOOM), "-f", "IDEM", "--co", "FORMAT=PNG",
                           "--webviewer", "none", src, os.path.join(work, "level")],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shutil.rmtree(work, ignore_errors=True)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[0] if lines else f"exit {proc.returncode}"


def section(src, tools, results, idem_format, start):
    version = gdal.VersionInfo("RELEASE_NAME")
    count = results["IDEM pool"]["tiles"]
    lines = [
        "### 10. Pyramid: IDEM in a pool against GDAL's tilers (issue 46)",
        "",
        f"`bench/pyramid_bench.py` (bench/pyramid.sh), {time.strftime('%Y-%m-%d')}, GDAL "
        f"{version}, Release build, {os.cpu_count()} cores. One zoom-{ZOOM} level of 256x256 "
        f"PNG tiles with alpha (bilinear) of `{os.path.basename(src)}` (UTM, 10 m), "
        f"{count} tiles, each tool with 2 processes or threads; every figure is a whole "
        "command (process start, GDAL's registration, the pool's start) timed from outside, "
        f"{ROUNDS} rounds with the tools interleaved, each on a fresh directory and ledger. "
        "`killed + resumed`: the process group is killed (SIGKILL) once half of the tiles "
        "exist, then the same command runs again (`--resume` for the tilers; IDEM with "
        f"`IDEM_STALE_SECONDS={STALE_SECONDS}`, since its resume waits until the leases of the "
        "claims the kill left in flight run out); `damaged` counts the tiles that then differ "
        "from the tool's uninterrupted level (or are missing). "
        "`rerun`: the command again over the finished level (`--resume` for the tilers). "
        "`gdal raster tile to /vsiidem/` is the same command with its output directory under "
        "`/vsiidem/`: each tile is written to a temporary file and renamed whole on close (no "
        "ledger and no key: `--resume` still only asks whether the file exists).",
        "",
        "| tool | tiles | new level, s | killed + resumed, s | damaged after the resume | "
        "rerun of the finished level, s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for tool in TOOLS:
        if tool not in tools:
            lines.append(f"| {tool} | – | n/a (GDAL {version}: needs 3.11+) | – | – | – |")
            continue
        r = results[tool]
        total = [k + s for k, s in zip(r["killed"], r["resumed"])]
        rerun_note = " (redoes every tile)" if tool == "plain pool" else ""
        lines.append(f"| {tool} | {r['tiles']} | {B.spread(r['new'])} | {B.spread(total)} | "
                     f"{max(r['damaged'])} | {B.spread(r['rerun'])}{rerun_note} |")
    lines += ["", f"The pools' own start (2 spawned workers importing GDAL, no tile): "
              f"{B.spread(start)} s, part of every pool figure above.", ""]
    if "gdal raster tile" in tools:
        idem, tiler = results["IDEM pool"], results["gdal raster tile"]
        new = [a / b for a, b in zip(idem["new"], tiler["new"])]
        rerun = [a / b for a, b in zip(idem["rerun"], tiler["rerun"])]
        per_tile = [(a - b) * 1000 / count for a, b in zip(idem["new"], tiler["new"])]
        lines += [
            "Goals of issue 46 (paired within a round):",
            "",
            f"- a new level, IDEM pool / `gdal raster tile`: {B.spread(new, '{:.2f}')}x, "
            f"{B.spread(per_tile, '{:.1f}')} ms per tile (goal <= 1.1x: "
            f"{B.met(B.med(new) <= 1.1)})",
            f"- the rerun of a finished level, IDEM pool / `gdal raster tile --resume`: "
            f"{B.spread(rerun, '{:.2f}')}x (goal <= 2x: {B.met(B.med(rerun) <= 2)}); IDEM's "
            "rerun checks each tile's key (source identity, options) and its recorded "
            "fingerprint, `--resume` only that a file exists.",
            "",
        ]
    if idem_format is not None:
        lines.append(f"`gdal raster tile -f IDEM --co FORMAT=PNG` on GDAL {version}: "
                     f"`{idem_format}`. `gdal raster tile` names each tile by the output "
                     "driver's extension before any creation option is read, so IDEM as its "
                     "format would need a driver per output format (an `IDEM_PNG` advertising "
                     "`png`), and each tile's source is a dataset the tiler made in memory, "
                     "which the key would have to describe. Not done.")
    else:
        lines.append(f"`gdal raster tile -f IDEM --co FORMAT=PNG` ran on GDAL {version}.")
    return lines


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "pool":
        pool_command(*sys.argv[2:5])
        return
    src = B.crop_covering(ZOOM, TILES, f"pyramid_utm_{TILES}.tif")
    expected = len(B.tiles_of(src, ZOOM))
    tools = [t for t in TOOLS if t not in TILERS_3_11 or raster_tile_available()]
    B.log(f"pyramid: {expected} z{ZOOM} tiles from {src}; tools: {', '.join(tools)}")
    results = measure(src, tools, expected)
    start = []
    for _ in range(ROUNDS):
        seconds = B.timed([sys.executable, os.path.abspath(__file__), "pool", src, "-", "start"],
                          B.env_with())[0]
        start.append(seconds)
    idem_format = raster_tile_with_idem(src) if "gdal raster tile" in tools else "n/a"
    if idem_format == "n/a":
        idem_format = f"not tried (no `gdal raster tile` in GDAL {gdal.VersionInfo('RELEASE_NAME')})"
    B.write_section("pyramid", section(src, tools, results, idem_format, start))


if __name__ == "__main__":
    main()
