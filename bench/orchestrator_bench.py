# SPDX-License-Identifier: MIT
"""The 1,024-tile batch of the resume benchmark (section 3) run three ways, each with two workers:
a Prefect 3 flow (bench/prefect_tiles.py: one task per tile, gdal.Warp through IDEM in the flow's
process, Prefect's thread pool of 2), the `xargs -P 2` batch of IDEM gdalwarp processes, and
`gdal2tiles.py --processes=2` on the same source and zoom. Each uninterrupted, then killed (SIGKILL
to its whole session once half the tiles exist) and resumed the way each is resumed: the same
flow again, the same xargs command again, `gdal2tiles.py --resume`. Reports times, ratios to the
xargs batch, milliseconds per tile, and the tiles' state after each resume. No target yet.

    orchestrator_bench.py       (bench/run's step "orchestrators"; IDEM_BENCH_* as idem_bench.py)

Writes the section "e2e-orchestrators" of bench/RESULTS.md."""

import os
import shutil
import subprocess
import sys
import time

import idem_bench as ib

VENV_PYTHON = os.path.join(ib.ROOT, "tools", "pyenv", "venv", "bin", "python")
FLOW = os.path.join(ib.HERE, "prefect_tiles.py")
STALE = "10"  # the lease, as in the resume benchmark


def write_flow_lines(path, src, tiles, root):
    with open(path, "w") as f:
        for tile in tiles:
            f.write(" ".join([src, *(repr(v) for v in tile[3]), ib.tile_path(root, tile)]) + "\n")


def run_flow(lines, env, kill_at=None, count=None):
    """The Prefect flow in its own session (Prefect's temporary API server included); SIGKILL
    the session once count() reaches kill_at. Returns (seconds, killed)."""
    start = time.perf_counter()
    proc = subprocess.Popen([VENV_PYTHON, FLOW, lines], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        return ib._watch(proc, start, kill_at, count)
    finally:
        try:  # what the flow left in its session (the API server of a killed flow)
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass


def flow_env(dsn, base, name):
    return ib.env_with(IDEM_LEDGER=dsn, IDEM_STALE_SECONDS=STALE,
                       PREFECT_HOME=os.path.join(base, name + ".prefect"),
                       PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_LOGGING_LEVEL="ERROR",
                       DO_NOT_TRACK="1")


def main():
    if not os.path.exists(VENV_PYTHON):
        sys.exit("orchestrator_bench: tools/pyenv/venv is missing (make deps)")
    src = ib.batch_source()
    tiles = ib.tiles_of(src, ib.ZOOM)
    n = len(tiles)
    half = n // 2
    names = [os.path.relpath(ib.tile_path("/", t), "/") for t in tiles]
    base = os.path.join(ib.WORK, "orchestrators")
    shutil.rmtree(base, ignore_errors=True)
    kinds = ("xargs", "xargs_killed", "prefect", "prefect_killed", "g2t", "g2t_killed")
    dirs = {k: os.path.join(base, k) for k in kinds}
    for k in ("xargs", "xargs_killed", "prefect", "prefect_killed"):
        ib.make_tile_dirs(dirs[k], tiles)
    out = {}

    def ledger_for(name):
        dsn = "sqlite:" + os.path.join(base, name + ".sqlite")
        ib.init_ledger(dsn)
        return dsn

    def idem_state(kind, dsn):
        rows = ib.ledger_query(dsn, "SELECT count(*), sum(attempt), sum(CASE WHEN completed_at "
                               "IS NOT NULL THEN 1 ELSE 0 END) FROM idem.ledger")[0]
        return ib.audit(dirs[kind], reference, names), ib.temp_leftovers(dirs[kind]), rows

    # xargs, uninterrupted: the reference pixels too
    args = os.path.join(base, "xargs.args")
    ib.write_arglist(args, src, tiles, dirs["xargs"], True)
    dsn = ledger_for("xargs")
    ib.drop_caches_dirty()
    ib.log("orchestrators: xargs uninterrupted")
    out["xargs"], _ = ib.run_batch(args, ib.env_with(IDEM_LEDGER=dsn, IDEM_STALE_SECONDS=STALE))
    reference = ib.reference_checksums(dirs["xargs"], names)

    # Prefect, uninterrupted
    lines = os.path.join(base, "prefect.lines")
    write_flow_lines(lines, src, tiles, dirs["prefect"])
    dsn = ledger_for("prefect")
    ib.drop_caches_dirty()
    ib.log("orchestrators: Prefect uninterrupted")
    out["prefect"], _ = run_flow(lines, flow_env(dsn, base, "prefect"))
    out["prefect_state"] = idem_state("prefect", dsn)

    # Prefect killed at half, the same flow again
    lines = os.path.join(base, "prefect_killed.lines")
    write_flow_lines(lines, src, tiles, dirs["prefect_killed"])
    dsn = ledger_for("prefect_killed")
    env = flow_env(dsn, base, "prefect_killed")
    ib.drop_caches_dirty()
    ib.log("orchestrators: Prefect killed")
    out["prefect_part1"], _ = run_flow(lines, env, half,
                                       lambda: ib.count_files(dirs["prefect_killed"], ".tif"))
    ib.drop_caches_dirty()
    ib.log("orchestrators: Prefect again")
    out["prefect_part2"], _ = run_flow(lines, env)
    out["prefect_killed_state"] = idem_state("prefect_killed", dsn)

    # xargs killed at half, the same command again
    args = os.path.join(base, "xargs_killed.args")
    ib.write_arglist(args, src, tiles, dirs["xargs_killed"], True)
    dsn = ledger_for("xargs_killed")
    env = ib.env_with(IDEM_LEDGER=dsn, IDEM_STALE_SECONDS=STALE)
    ib.drop_caches_dirty()
    ib.log("orchestrators: xargs killed")
    out["xargs_part1"], _ = ib.run_batch(args, env, half,
                                         lambda: ib.count_files(dirs["xargs_killed"], ".tif"))
    ib.drop_caches_dirty()
    ib.log("orchestrators: xargs again")
    out["xargs_part2"], _ = ib.run_batch(args, env)
    out["xargs_killed_state"] = idem_state("xargs_killed", dsn)

    # gdal2tiles, uninterrupted, then killed at half and --resume
    ib.drop_caches_dirty()
    ib.log("orchestrators: gdal2tiles")
    out["g2t"], _, g2t_args = ib.run_gdal2tiles(src, dirs["g2t"])
    ib.drop_caches_dirty()
    ib.log("orchestrators: gdal2tiles killed")
    out["g2t_part1"], _, _ = ib.run_gdal2tiles(src, dirs["g2t_killed"], kill_at=half)
    ib.drop_caches_dirty()
    ib.log("orchestrators: gdal2tiles --resume")
    out["g2t_part2"], _, _ = ib.run_gdal2tiles(src, dirs["g2t_killed"], resume=True)
    out["g2t_tiles"] = ib.count_files(dirs["g2t_killed"], ".png")
    shutil.rmtree(base, ignore_errors=True)
    report(out, n, g2t_args)


def report(out, n, g2t_args):
    x = out["xargs"]
    xk = out["xargs_part1"] + out["xargs_part2"]
    pk = out["prefect_part1"] + out["prefect_part2"]
    gk = out["g2t_part1"] + out["g2t_part2"]

    def row(name, first, rerun, total):
        rerun_text = "–" if rerun is None else f"{rerun:.1f}"
        return (f"| {name} | {first:.1f} | {rerun_text} | {total:.1f} | {total / x:.2f} | "
                f"{total / n * 1000:.0f} |")

    def state(value):
        (ok, corrupt, missing), temp, (rows, attempts, completed) = value
        return (f"{ok} ok, {corrupt} corrupt, {missing} missing; {temp} temp dirs; ledger "
                f"{rows} rows, {completed} completed, {attempts} attempts")

    lines = [
        f"### 7. Under an orchestrator: Prefect against xargs and gdal2tiles (issue 32, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())})",
        "",
        f"The {n} zoom-14 tiles of section 3, two workers each: a Prefect 3.9 flow "
        "(`bench/prefect_tiles.py`: one task per tile, `gdal.Warp` through IDEM in the flow's "
        "process, `ThreadPoolTaskRunner(max_workers=2)`, its temporary API server included), the "
        "`xargs -P 2` batch of IDEM gdalwarp processes of section 3, and `gdal2tiles.py "
        "--processes=2`. IDEM runs use an SQLite ledger and IDEM_STALE_SECONDS=10. Killed: "
        "SIGKILL to the whole session once half the tiles exist, then resumed as each is: the "
        "same flow again, the same xargs command again, `gdal2tiles.py --resume`. No target.",
        "",
        "| approach | first part (s) | rerun (s) | total (s) | total / xargs uninterrupted | "
        "ms per tile |",
        "|---|---:|---:|---:|---:|---:|",
        row("xargs, IDEM gdalwarp, uninterrupted", x, None, x),
        row("Prefect flow, gdal.Warp through IDEM, uninterrupted", out["prefect"], None,
            out["prefect"]),
        row("gdal2tiles.py --processes=2, uninterrupted", out["g2t"], None, out["g2t"]),
        row("xargs killed, same command again", out["xargs_part1"], out["xargs_part2"], xk),
        row("Prefect killed, same flow again", out["prefect_part1"], out["prefect_part2"], pk),
        row("gdal2tiles.py killed, then --resume", out["g2t_part1"], out["g2t_part2"], gk),
        "",
        f"The Prefect flow against the xargs batch, uninterrupted: {out['prefect'] - x:+.1f} s, "
        f"{(out['prefect'] - x) / n * 1000:+.1f} ms per tile at 2 workers: what its API "
        "server's start and the task runs' states recorded through it add, less what "
        "`gdal.Warp` in threads of one process saves over a gdalwarp process per tile (a "
        "process start, GDAL's and the plugin's setup, a ledger connection). gdal2tiles "
        f"(`{' '.join(g2t_args[:-2])} SOURCE OUT`) reads the source once in a process pool and "
        "writes PNG tiles with alpha: not the same work, the cost of a tiler without per-tile "
        "processes and without a ledger.",
        "",
        "After each IDEM run (tiles against the xargs batch's checksums):",
        "",
        f"- Prefect uninterrupted: {state(out['prefect_state'])}",
        f"- Prefect killed and run again: {state(out['prefect_killed_state'])}",
        f"- xargs killed and run again: {state(out['xargs_killed_state'])}",
        f"- gdal2tiles killed and resumed: {out['g2t_tiles']} PNG tiles (its resume keeps "
        "whatever file exists; section 3 audits its tiles)",
    ]
    ib.write_section("e2e-orchestrators", lines)


if __name__ == "__main__":
    main()
