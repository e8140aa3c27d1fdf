#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""End-to-end benchmarks of the IDEM driver through the real programs (issues 4 and 7).

Run by bench/run inside scripts/with-postgres; each subcommand writes its own section of
bench/RESULTS.md between `<!-- NAME:begin -->` and `<!-- NAME:end -->` markers:

    idem_bench.py machine LOAD_BEFORE   versions, machine, load (section "e2e-machine")
    idem_bench.py overhead              200 MB warp, GTiff vs IDEM (section "e2e-overhead")
    idem_bench.py tiles                 per-tile overhead, sequential gdalwarp (section "e2e-tiles")
    idem_bench.py resume                1,000-tile batch killed and resumed, by the same command
                                        and through `gdal-idem pending` (section "e2e-resume")
    idem_bench.py skip                  reruns of completed work (section "e2e-skip")
    idem_bench.py contention            8 workers on 64 tiles (section "e2e-contention")
    idem_bench.py scale DB              10M-row PostgreSQL ledger (section "e2e-scale")

Environment: IDEM_BENCH_BUILD (build dir), IDEM_BENCH_WORK (scratch dir, shared between the
subcommands: the sources are generated once), IDEM_TEST_PG_DSN (from scripts/with-postgres).
Sizes: IDEM_BENCH_SIZE (big source side, default 8192), IDEM_BENCH_WARP_ROUNDS (4),
IDEM_BENCH_TILE_ROUNDS (2), IDEM_BENCH_TILES (tiles per overhead batch, 24), IDEM_BENCH_BATCH
(tiles of the resume batch, 1000), IDEM_BENCH_CLI_TIMEOUT (seconds for reap/verify at scale, 150),
IDEM_BENCH_VERIFY_SECONDS (verify at 10M rows is timed from its progress bar over this long, 60).
Timings are reported, never asserted.
"""

import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
from osgeo import gdal, osr

gdal.UseExceptions()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.environ.get("IDEM_BENCH_RESULTS", os.path.join(HERE, "RESULTS.md"))
BUILD = os.path.abspath(os.environ.get("IDEM_BENCH_BUILD", os.path.join(ROOT, "build-release")))
PLUGIN_DIR = os.path.join(BUILD, "gdalplugins")
GDAL_IDEM = os.path.join(BUILD, "src", "gdal-idem")
WORK = os.path.abspath(os.environ.get("IDEM_BENCH_WORK", "/tmp/idem-bench"))
SIZE = int(os.environ.get("IDEM_BENCH_SIZE", "8192"))
WARP_ROUNDS = int(os.environ.get("IDEM_BENCH_WARP_ROUNDS", "4"))
TILE_ROUNDS = int(os.environ.get("IDEM_BENCH_TILE_ROUNDS", "2"))
TILES_PER_BATCH = int(os.environ.get("IDEM_BENCH_TILES", "24"))
BATCH = int(os.environ.get("IDEM_BENCH_BATCH", "1000"))
ZOOM = 14
WARP = ["-t_srs", "EPSG:3857", "-r", "bilinear"]


# ------------------------------------------------------------------------------------------
# Small helpers


def log(*args):
    print("[idem_bench]", *args, file=sys.stderr, flush=True)


def env_with(**extra):
    env = dict(os.environ)
    env["GDAL_DRIVER_PATH"] = PLUGIN_DIR
    env.pop("CPL_DEBUG", None)
    for key, value in extra.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def timed_with_cpu(args, env, check=True, cwd=None):
    """Run a command; return (seconds, CPU seconds of the process (user + system, from the
    kernel's accounting of waited-for children), stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([str(a) for a in args], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, proc.stderr


def timed(args, env, check=True, cwd=None):
    """Run a command; return (seconds, stderr)."""
    elapsed, _, stderr = timed_with_cpu(args, env, check=check, cwd=cwd)
    return elapsed, stderr


TIMING = re.compile(r"IDEM: timing: (.+?) ([0-9.]+) ms")


def timing_lines(stderr):
    """The driver's `--debug on` step timings (CPL_DEBUG=IDEM), summed per step."""
    steps = {}
    for name, ms in TIMING.findall(stderr):
        steps[name] = steps.get(name, 0.0) + float(ms)
    return steps


def med(values):
    return statistics.median(values) if values else float("nan")


def spread(values, fmt="{:.2f}", unit=""):
    """median (min-max) of a list, formatted."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0]) + unit + " (n=1)"
    return (fmt.format(med(values)) + unit + " (" + fmt.format(min(values)) + "–" +
            fmt.format(max(values)) + f", n={len(values)})")


def met(ok):
    return "**met**" if ok else "**NOT met**"


def write_section(name, lines):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    body = "\n".join([begin] + lines + [end]) + "\n"
    text = open(RESULTS).read() if os.path.exists(RESULTS) else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        tail = rest.split(end, 1)[1]
        text = head + body.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + body
    tmp = RESULTS + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, RESULTS)
    print(body)


def drop_caches_dirty():
    """Write back dirty pages so one run's writeback does not land in the next run's timing."""
    os.sync()


# ------------------------------------------------------------------------------------------
# Ledgers


def pg_base_dsn():
    dsn = os.environ.get("IDEM_TEST_PG_DSN")
    if not dsn:
        sys.exit("idem_bench.py: run inside scripts/with-postgres (IDEM_TEST_PG_DSN)")
    return dsn


def pg_dsn_for(name):
    base = pg_base_dsn()
    return re.sub(r"dbname=\S+", "dbname=" + name, base)


def pg_new_database(prefix):
    import psycopg
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_base_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = pg_dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis")
    return dsn


def start_pgbouncer():
    """PgBouncer in session mode in front of the benchmark cluster (autotest/pgbouncer.py)."""
    sys.path.insert(0, os.path.join(ROOT, "autotest"))
    from pgbouncer import PgBouncer
    return PgBouncer(pg_base_dsn()).start()


def pg_drop_database(dsn):
    import psycopg
    name = re.search(r"dbname=(\S+)", dsn).group(1)
    with psycopg.connect(pg_base_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_query(dsn, sql, params=()):
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else None


def ledger_query(dsn, sql):
    """Run SQL on either backend (table names as in PostgreSQL's idem schema)."""
    if dsn.startswith("sqlite:"):
        conn = sqlite3.connect(dsn[len("sqlite:"):])
        try:
            cur = conn.execute(sql.replace("idem.", ""))
            rows = cur.fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    return pg_query(dsn, sql)


def init_ledger(dsn):
    """Apply the schema outside the timed runs (ledger_bench init opens the ledger)."""
    subprocess.run([os.path.join(BUILD, "bench", "ledger_bench"), "init", dsn], check=True,
                   stdout=subprocess.DEVNULL)


# ------------------------------------------------------------------------------------------
# Sources and tiles


def big_source():
    """SIZE x SIZE x 3 Byte, UTM 33N, 10 m, tiled, uncompressed (~200 MB at 8192)."""
    path = os.path.join(WORK, "src", "scene_utm.tif")
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part.tif"
    ds = gdal.GetDriverByName("GTiff").Create(tmp, SIZE, SIZE, 3, gdal.GDT_Byte, ["TILED=YES"])
    ds.SetGeoTransform([500000.0, 10.0, 0, 4650000.0, 0, -10.0])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    rng = np.random.default_rng(1)
    step = 512
    for b in range(3):
        band = ds.GetRasterBand(b + 1)
        for y0 in range(0, SIZE, step):
            rows = min(step, SIZE - y0)
            yy, xx = np.mgrid[y0:y0 + rows, 0:SIZE]
            data = (xx * (b + 1) + yy * 2) % 251 + rng.integers(0, 5, xx.shape)
            band.WriteArray(data.astype(np.uint8), 0, y0)
    ds = None
    os.rename(tmp, path)
    return path


def tiles_of(path, zoom):
    """XYZ tiles (EPSG:3857, 256x256) covering a raster, as (z, x, y, (xmin, ymin, xmax, ymax))."""
    vrt = gdal.Warp("", path, format="VRT", dstSRS="EPSG:3857")
    gt = vrt.GetGeoTransform()
    xmin, ymax = gt[0], gt[3]
    xmax, ymin = xmin + gt[1] * vrt.RasterXSize, ymax + gt[5] * vrt.RasterYSize
    origin = 20037508.342789244
    size = 2 * origin / (1 << zoom)
    x0, x1 = int((xmin + origin) // size), int((xmax + origin) // size)
    y0, y1 = int((origin - ymax) // size), int((origin - ymin) // size)
    tiles = []
    for x in range(x0, x1 + 1):
        for y in range(y0, y1 + 1):
            bounds = (-origin + x * size, origin - (y + 1) * size, -origin + (x + 1) * size,
                      origin - y * size)
            tiles.append((zoom, x, y, bounds))
    return tiles


def crop_covering(zoom, count, name):
    """A crop of the big source (WORK/src/`name`) whose `zoom` XYZ coverage is at least `count`
    tiles (or the whole source)."""
    path = os.path.join(WORK, "src", name)
    if os.path.exists(path):
        return path
    src = big_source()
    # A tile's side in Web Mercator metres, x1.35 at 42 degrees N: a side of n tiles is about
    # n * tile / 1.35 / 10 source pixels. Grow the crop until it covers `count` tiles.
    tile = 2 * 20037508.342789244 / (1 << zoom)
    side = max(64, int((count ** 0.5 - 1) * tile / 1.35 / 10))
    while True:
        tmp = path + ".part.tif"
        gdal.Translate(tmp, src, srcWin=[0, 0, min(side, SIZE), min(side, SIZE)],
                       creationOptions=["TILED=YES"])
        if len(tiles_of(tmp, zoom)) >= count or side >= SIZE:
            break
        side += 32
    os.rename(tmp, path)
    return path


def batch_source():
    """A crop of the big source whose zoom-14 coverage is about BATCH tiles."""
    return crop_covering(ZOOM, BATCH, f"batch_utm_{BATCH}.tif")


def tile_args(src, bounds, dst):
    return WARP + ["-te"] + [repr(v) for v in bounds] + ["-ts", "256", "256", src, dst]


def tile_path(root, tile):
    z, x, y, _ = tile
    return os.path.join(root, str(z), str(x), f"{y}.tif")


def make_tile_dirs(root, tiles):
    for tile in tiles:
        os.makedirs(os.path.dirname(tile_path(root, tile)), exist_ok=True)


def idem_opts(namespace=None):
    opts = ["-of", "IDEM", "-co", "FORMAT=GTiff"]
    if namespace:
        opts += ["-co", f"NAMESPACE={namespace}"]
    return opts


def checksums(path):
    ds = gdal.Open(path)
    return tuple(ds.GetRasterBand(i + 1).Checksum() for i in range(ds.RasterCount))


def audit(root, reference, names):
    """Tiles under root against the reference checksums: (ok, corrupt, missing)."""
    ok = corrupt = missing = 0
    for name in names:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            missing += 1
            continue
        try:
            with gdal.quiet_errors() if hasattr(gdal, "quiet_errors") else _Quiet():
                sums = checksums(path)
        except Exception:
            corrupt += 1
            continue
        if sums != reference[name]:
            corrupt += 1
        else:
            ok += 1
    return ok, corrupt, missing


class _Quiet:
    def __enter__(self):
        gdal.PushErrorHandler("CPLQuietErrorHandler")

    def __exit__(self, *exc):
        gdal.PopErrorHandler()


def reference_checksums(root, names):
    ref = {}
    for name in names:
        ref[name] = checksums(os.path.join(root, name))
    return ref


def tree_files(root, suffix):
    names = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".idem-tmp-")]
        for f in files:
            if f.endswith(suffix):
                names.append(os.path.relpath(os.path.join(directory, f), root))
    return sorted(names)


def temp_leftovers(root):
    count = 0
    for _, dirs, files in os.walk(root):
        count += sum(1 for d in dirs if d.startswith(".idem-tmp-"))
        count += sum(1 for f in files if f.startswith(".idem-tmp-"))
    return count


# ------------------------------------------------------------------------------------------
# machine


def cmd_output(args):
    try:
        return subprocess.run(args, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "not found"


def cmd_machine(load_before):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    mem_kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    proj = osr.GetPROJVersionMajor(), osr.GetPROJVersionMinor(), osr.GetPROJVersionMicro()
    pg = pg_query(pg_base_dsn(), "SHOW server_version")[0][0]
    postgis = pg_query(pg_base_dsn(), "SELECT postgis_lib_version()")[0][0]
    fsync = pg_query(pg_base_dsn(), "SHOW fsync")[0][0]
    disk = cmd_output(["df", "-h", "--output=source,fstype,size", WORK]).splitlines()[-1]
    head = cmd_output(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = cmd_output(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    write_section("e2e-machine", [
        f"## End-to-end benchmarks (bench/run, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())})",
        "",
        f"- Machine: {os.cpu_count()} cores ({cpu}), {mem_kb / 1048576:.1f} GiB RAM, "
        f"{os.uname().sysname} {os.uname().release}; work dir {WORK} on `{disk}`",
        f"- Versions: GDAL {gdal.VersionInfo('RELEASE_NAME')}, PROJ {'.'.join(map(str, proj))}, "
        f"PostgreSQL {pg} (PostGIS {postgis}; pg_virtualenv cluster of scripts/with-postgres, "
        f"fsync={fsync}), SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
        f"numpy {np.__version__}",
        f"- gdal-idem {head}{' + uncommitted changes' if dirty else ''}, build `{BUILD}` "
        "(Release)",
        f"- Load average (1, 5, 15 min) before the benchmarks: {load_before}; after: see the "
        "end of this file. Timings taken on a loaded machine are noisy: compare paired ratios, "
        "not absolute times.",
        "- Method: every timed command is a real program run (`gdalwarp`, `xargs`, "
        "`gdal2tiles.py`) or `osgeo.gdal` in one process; `sync` before each timed run so one "
        "run's writeback does not land in the next; A/B pairs alternate (A B A B ...), each B "
        "compared with the mean of the A runs on either side of it. Step breakdowns come from "
        "the driver's `timing:` debug lines (`--config CPL_DEBUG IDEM`).",
    ])


# ------------------------------------------------------------------------------------------
# 1. overhead of one 200 MB warp


def bracketed(baseline, variants, rounds):
    """Run A B1 A B2 A ... (variant order reversed every other round). Returns
    {variant: [(seconds, baseline_mean, steps)]} and the baseline times."""
    results = {name: [] for name, _ in variants}
    base_times = []
    for r in range(rounds):
        order = variants if r % 2 == 0 else list(reversed(variants))
        previous = baseline()
        base_times.append(previous)
        for name, run in order:
            seconds, steps = run()
            following = baseline()
            base_times.append(following)
            results[name].append((seconds, (previous + following) / 2, steps))
            previous = following
            log(f"  {name}: {seconds:.3f} s vs baseline {results[name][-1][1]:.3f} s")
    return results, base_times


# "claim" is the driver's first question to the ledger: the claim, or the completed row.
STEP_ORDER = ["options", "ledger open", "describe+digest+key", "claim", "prepare",
              "materialise", "heartbeat+commit", "complete", "open output"]


def cmd_overhead():
    src = big_source()
    out_dir = os.path.join(WORK, "big")
    os.makedirs(out_dir, exist_ok=True)
    plain_out = os.path.join(out_dir, "plain.tif")
    idem_out = os.path.join(out_dir, "idem.tif")
    sqlite_dsn = "sqlite:" + os.path.join(WORK, "big-ledger.sqlite")
    pg_dsn = pg_new_database("idem_bench_big")
    for dsn in (sqlite_dsn, pg_dsn):
        init_ledger(dsn)
    counter = iter(range(1_000_000))
    commands = {}

    def plain():
        for p in (plain_out, idem_out):
            if os.path.exists(p):
                os.unlink(p)
        drop_caches_dirty()
        args = ["gdalwarp", "-q", "-overwrite", "-of", "GTiff"] + WARP + [src, plain_out]
        commands["GTiff"] = args
        seconds, _ = timed(args, env_with(CPL_DEBUG="IDEM"))
        return seconds

    def idem(dsn, fresh, fsync):
        def run():
            for p in (plain_out, idem_out):
                if os.path.exists(p):
                    os.unlink(p)
            if fresh:  # digest never computed: the cache forgets the source
                ledger_query(dsn, "DELETE FROM idem.source_digest")
            drop_caches_dirty()
            args = (["gdalwarp", "-q", "-overwrite"] + idem_opts(f"run{next(counter)}") + WARP +
                    [src, "/vsiidem/" + idem_out])
            commands["IDEM"] = args
            seconds, err = timed(args, env_with(CPL_DEBUG="IDEM", IDEM_LEDGER=dsn,
                                                IDEM_FSYNC="YES" if fsync else "NO"))
            steps = timing_lines(err)
            if "materialise" not in steps:
                raise RuntimeError("IDEM did not warp (skipped?):\n" + err[-3000:])
            return seconds, steps
        return run

    # Each process connects to the ledger once: directly, a PostgreSQL backend starts and loads
    # PostGIS (~50 ms here); through PgBouncer, the setup docs/operations.md recommends for
    # process-per-job workers, a pooled backend is reused.
    bouncer = start_pgbouncer()
    pooled_dsn = bouncer.dsn_for(pg_dsn)
    variants = [
        ("SQLite, fresh digest", idem(sqlite_dsn, True, True)),
        ("SQLite, cached digest", idem(sqlite_dsn, False, True)),
        ("PostgreSQL, fresh digest", idem(pg_dsn, True, True)),
        ("PostgreSQL, cached digest", idem(pg_dsn, False, True)),
        ("PostgreSQL through PgBouncer, fresh digest", idem(pooled_dsn, True, True)),
        ("PostgreSQL through PgBouncer, cached digest", idem(pooled_dsn, False, True)),
        ("SQLite, cached digest, IDEM_FSYNC=NO", idem(sqlite_dsn, False, False)),
    ]
    # One warm-up run for the page cache. IDEM needs none of its own: every run is a new process
    # (no state carries over but the ledgers), and each ledger's digest cache is filled by its
    # "fresh digest" variant before any "cached digest" one runs (round 1 is in list order).
    log("overhead: warm-up (page cache)")
    plain()
    try:
        results, base_times = bracketed(plain, variants, WARP_ROUNDS)
    finally:
        bouncer.stop()

    size_mb = os.path.getsize(src) / 1e6
    out_mb = os.path.getsize(plain_out) / 1e6
    lines = [
        "### 1a. Overhead of one large warp (issue 4)",
        "",
        f"Source: {SIZE}x{SIZE}x3 Byte, UTM 33N, 10 m, tiled GTiff ({size_mb:.0f} MB, in the page "
        f"cache); output {out_mb:.0f} MB in EPSG:3857, bilinear. {WARP_ROUNDS} rounds of "
        "A B1 A B2 ... (A = plain GTiff).",
        "",
        f"- A: `{' '.join(commands['GTiff'])}`".replace(WORK, "$WORK"),
        f"- B: `IDEM_LEDGER=... {' '.join(commands['IDEM'])}`".replace(WORK, "$WORK") +
        " (a new NAMESPACE per run so every run does the work; \"fresh digest\" empties the "
        "ledger's source-digest cache first, so the 200 MB source is hashed in the run)",
        "",
        f"Plain `gdalwarp -of GTiff`: {spread(base_times, unit=' s')}.",
        "",
        "| variant | IDEM run (s) | IDEM / GTiff (paired) | target | verdict |",
        "|---|---:|---:|---:|:--|",
    ]
    for name, runs in results.items():
        ratios = [s / b for s, b, _ in runs]
        target = 1.05 if "fresh" in name else 1.03
        lines.append(f"| {name} | {spread([s for s, _, _ in runs])} | "
                     f"{spread(ratios, fmt='{:.3f}')} | <= {target:.2f} | "
                     f"{met(med(ratios) <= target)} |")
    lines += ["", "Where the time goes inside the IDEM runs (driver `timing:` lines, median ms):",
              "", "| step | " + " | ".join(results) + " |",
              "|---|" + "---:|" * len(results)]
    for step in STEP_ORDER:
        cells = [f"{med([s.get(step, 0.0) for _, _, s in runs]):.1f}" for runs in results.values()]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    own = {name: [sum(v for k, v in s.items() if k != "materialise") for _, _, s in runs]
           for name, runs in results.items()}
    cells = []
    for name, runs in results.items():
        share = [o / s["materialise"] for o, (_, _, s) in zip(own[name], runs)]
        cells.append(f"{med(own[name]):.0f} ms = {100 * med(share):.1f}%")
    lines.append("| **IDEM's own time** (all but materialise) / materialise | " +
                 " | ".join(cells) + " |")
    verdicts = []
    for name, runs in results.items():
        share = med([o / s["materialise"] for o, (_, _, s) in zip(own[name], runs)])
        verdicts.append(met(share <= (0.05 if "fresh" in name else 0.03)))
    lines.append("| the same against the target (5% fresh, 3% cached) | " + " | ".join(verdicts) +
                 " |")
    lines += [
        "",
        "Reading: *describe+digest+key* includes the content digest of the source when the "
        "digest is fresh (one pass over 200 MB, one thread per core; docs/keys.md) and only "
        "stat + cache lookup when cached; "
        "*heartbeat+commit* is the lease check before publishing (a renewal only when the "
        "claim is older than a third of the lease: none here), fsync of the output and its "
        "directory, and the rename; *complete* is the fenced completion (plus stopping the lease thread); "
        "the plain GTiff run leaves its 200 MB dirty in the page cache instead of fsyncing it. "
        "Process start, GDAL's own setup and the end-of-process work are in the wall times only.",
    ]
    write_section("e2e-overhead", lines)
    pg_drop_database(pg_dsn)
    # Keep the completed IDEM output for the skip benchmark: one SQLite and one PG ledger row.
    state = {"src": src, "idem_out": idem_out, "plain_seconds": base_times,
             "idem_cached_seconds": [s for s, _, _ in results["SQLite, cached digest"]]}
    with open(os.path.join(WORK, "overhead.json"), "w") as f:
        json.dump(state, f)


# ------------------------------------------------------------------------------------------
# 1b. per-tile overhead


def cmd_tiles():
    src = big_source()
    all_tiles = tiles_of(src, ZOOM)
    rng = random.Random(7)
    tiles = rng.sample(all_tiles, min(TILES_PER_BATCH, len(all_tiles)))
    root = os.path.join(WORK, "tiles-overhead")
    sqlite_dsn = "sqlite:" + os.path.join(WORK, "tiles-ledger.sqlite")
    pg_dsn = pg_new_database("idem_bench_tiles")
    for dsn in (sqlite_dsn, pg_dsn):
        init_ledger(dsn)
    counter = iter(range(1_000_000))

    def clean():
        shutil.rmtree(root, ignore_errors=True)
        make_tile_dirs(root, tiles)
        drop_caches_dirty()

    def plain():
        clean()
        env = env_with(CPL_DEBUG="IDEM")
        start = time.perf_counter()
        for tile in tiles:
            timed(["gdalwarp", "-q", "-overwrite", "-of", "GTiff"] +
                  tile_args(src, tile[3], tile_path(root, tile)), env)
        return time.perf_counter() - start

    def idem(dsn, fsync):
        def run():
            clean()
            namespace = f"tiles{next(counter)}"
            env = env_with(CPL_DEBUG="IDEM", IDEM_LEDGER=dsn, IDEM_FSYNC="YES" if fsync else "NO")
            steps = {}
            start = time.perf_counter()
            for tile in tiles:
                _, err = timed(["gdalwarp", "-q", "-overwrite"] + idem_opts(namespace) +
                               tile_args(src, tile[3], "/vsiidem/" + tile_path(root, tile)), env)
                for k, v in timing_lines(err).items():
                    steps.setdefault(k, []).append(v)
            return time.perf_counter() - start, {k: med(v) for k, v in steps.items()}
        return run

    bouncer = start_pgbouncer()
    pooled_dsn = bouncer.dsn_for(pg_dsn)
    variants = [
        ("SQLite, durable", idem(sqlite_dsn, True)),
        ("SQLite, IDEM_FSYNC=NO", idem(sqlite_dsn, False)),
        ("PostgreSQL, durable", idem(pg_dsn, True)),
        ("PostgreSQL through PgBouncer, durable", idem(pooled_dsn, True)),
    ]
    # Warm-up: the page cache (a plain batch), and each ledger's digest of the source (one tile
    # each; the variants are measured with the digest cached).
    log("tiles: warm-up (page cache, digest caches)")
    plain()
    for dsn in (sqlite_dsn, pg_dsn, pooled_dsn):
        timed(["gdalwarp", "-q", "-overwrite"] + idem_opts("warm-up") +
              tile_args(src, tiles[0][3], "/vsiidem/" + tile_path(root, tiles[0])),
              env_with(IDEM_LEDGER=dsn))
    try:
        results, base_times = bracketed(plain, variants, TILE_ROUNDS)
    finally:
        bouncer.stop()
    n = len(tiles)
    lines = [
        "### 1b. Per-tile overhead (issue 4)",
        "",
        f"{n} random zoom-{ZOOM} tiles (256x256, EPSG:3857, bilinear) cut from the same "
        f"{SIZE}x{SIZE} UTM source by one `gdalwarp` process each, one after another "
        f"(`gdalwarp -q -overwrite -of GTiff|IDEM ... -te XMIN YMIN XMAX YMAX -ts 256 256 SRC "
        f"[/vsiidem/]TILE.tif`); source digest cached; {TILE_ROUNDS} rounds of A B1 A B2 ...",
        "",
        f"Plain GTiff: {spread([1000 * t / n for t in base_times], fmt='{:.0f}', unit=' ms')} "
        "per tile (a whole process).",
        "",
        "| variant | ms per tile | overhead per tile (ms, paired) | IDEM / GTiff |",
        "|---|---:|---:|---:|",
    ]
    for name, runs in results.items():
        lines.append(f"| {name} | {spread([1000 * s / n for s, _, _ in runs], fmt='{:.0f}')} | "
                     f"{spread([1000 * (s - b) / n for s, b, _ in runs], fmt='{:.1f}')} | "
                     f"{spread([s / b for s, b, _ in runs], fmt='{:.3f}')} |")
    lines += ["", "Per-tile step times inside the driver (median over tiles, then over rounds; ms):",
              "", "| step | " + " | ".join(results) + " |", "|---|" + "---:|" * len(results)]
    for step in STEP_ORDER:
        cells = [f"{med([s.get(step, 0.0) for _, _, s in runs]):.2f}" for runs in results.values()]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    lines += ["", "No target is set for tiles in the issue beyond the 5% / 3% of 1a; a 256x256 "
              "warp is so small that the fixed costs above dominate it (see the ratio). "
              "PostgreSQL: each process starts a server backend and loads PostGIS into it "
              "(docs/operations.md); through PgBouncer in session mode (autotest/pgbouncer.py, "
              "the setup docs/operations.md recommends) the backends are reused."]
    write_section("e2e-tiles", lines)
    pg_drop_database(pg_dsn)


# ------------------------------------------------------------------------------------------
# 3. resume of a 1,000-tile batch


def write_arglist(path, src, tiles, root, idem):
    with open(path, "w") as f:
        for tile in tiles:
            dst = tile_path(root, tile)
            args = ["-q", "-overwrite"] + (idem_opts() if idem else ["-of", "GTiff"])
            args += tile_args(src, tile[3], ("/vsiidem/" if idem else "") + dst)
            f.write(" ".join(args) + "\n")


def write_commands(path, src, tiles, root):
    """The same IDEM batch as complete command lines, as users keep it in a batch file (what
    `gdal-idem pending` reads)."""
    with open(path, "w") as f:
        for tile in tiles:
            args = ["gdalwarp", "-q", "-overwrite"] + idem_opts() + \
                tile_args(src, tile[3], "/vsiidem/" + tile_path(root, tile))
            f.write(shlex.join(args) + "\n")


def run_pending_batch(commands, env, printed):
    """`gdal-idem pending COMMANDS | xargs -d '\\n' -P 2 -I{} sh -c '{}'` (docs/recipes.md), the
    printed lines kept in `printed` and pending's --count in `printed`.count. Returns seconds."""
    script = (f"{shlex.quote(GDAL_IDEM)} pending --count {shlex.quote(commands)} "
              f"2>{shlex.quote(printed + '.count')} | tee {shlex.quote(printed)} | "
              "xargs -d '\\n' -P 2 -I{} sh -c '{}'")
    start = time.perf_counter()
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", script], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"pending batch exited {proc.returncode}: {proc.stderr[-3000:]}")
    return elapsed


def snapshot_state(paths, dest):
    """Copy files and trees (mtimes kept to the nanosecond: the ledger's output fingerprints)."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for path in paths:
        target = os.path.join(dest, os.path.basename(path))
        if os.path.isdir(path):
            shutil.copytree(path, target, symlinks=True, copy_function=shutil.copy2)
        elif os.path.exists(path):
            shutil.copy2(path, target)


def restore_state(paths, snapshot):
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)
        saved = os.path.join(snapshot, os.path.basename(path))
        if os.path.isdir(saved):
            shutil.copytree(saved, path, symlinks=True, copy_function=shutil.copy2)
        elif os.path.exists(saved):
            shutil.copy2(saved, path)


def run_batch(arglist, env, kill_at=None, count=None):
    """xargs -P 2 -L 1 gdalwarp < arglist in its own session; SIGKILL the whole session once
    count() reaches kill_at. Returns (seconds, killed)."""
    start = time.perf_counter()
    with open(arglist) as stdin:
        proc = subprocess.Popen(["xargs", "-P", "2", "-L", "1", "gdalwarp"], stdin=stdin,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        return _watch(proc, start, kill_at, count)


def _watch(proc, start, kill_at, count):
    errors = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()))
    reader.start()
    killed = False
    while proc.poll() is None:
        if kill_at is not None and count() >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.02)
    proc.wait()
    elapsed = time.perf_counter() - start
    reader.join()
    if not killed and proc.returncode != 0:
        raise RuntimeError(f"batch exited {proc.returncode}: {errors[0][-3000:] if errors else ''}")
    return elapsed, killed


def count_files(root, suffix):
    n = 0
    for _, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".idem-tmp-")]
        n += sum(1 for f in files if f.endswith(suffix))
    return n


def run_gdal2tiles(src, out, resume=False, kill_at=None):
    args = ["gdal2tiles.py", "--xyz", "-z", str(ZOOM), "-r", "bilinear", "-w", "none",
            "--processes=2", "-q"] + (["--resume"] if resume else []) + [src, out]
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env_with(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    seconds, killed = _watch(proc, start, kill_at, lambda: count_files(out, ".png"))
    return seconds, killed, args


def cmd_resume():
    src = batch_source()
    tiles = tiles_of(src, ZOOM)
    n = len(tiles)
    names = [os.path.relpath(tile_path("/", t), "/") for t in tiles]
    stale = "10"
    base = os.path.join(WORK, "resume")
    shutil.rmtree(base, ignore_errors=True)
    dirs = {k: os.path.join(base, k) for k in ("idem_full", "idem_resume", "plain", "g2t_clean",
                                               "g2t_resume")}
    for k in ("idem_full", "idem_resume", "plain"):
        make_tile_dirs(dirs[k], tiles)
    half = n // 2
    out = {}

    def ledger_for(name):
        dsn = "sqlite:" + os.path.join(base, name + ".sqlite")
        init_ledger(dsn)
        return dsn

    # a. IDEM, uninterrupted (also the reference pixels of the gdalwarp approaches)
    full_dsn = ledger_for("idem_full")
    arg_full = os.path.join(base, "idem_full.args")
    write_arglist(arg_full, src, tiles, dirs["idem_full"], True)
    env_full = env_with(IDEM_LEDGER=full_dsn, IDEM_STALE_SECONDS=stale)
    drop_caches_dirty()
    log("resume: IDEM uninterrupted")
    out["idem_full"], _ = run_batch(arg_full, env_full)
    reference = reference_checksums(dirs["idem_full"], names)

    # b. IDEM killed at about half, then the same command again
    res_dsn = ledger_for("idem_resume")
    arg_res = os.path.join(base, "idem_resume.args")
    write_arglist(arg_res, src, tiles, dirs["idem_resume"], True)
    env_res = env_with(IDEM_LEDGER=res_dsn, IDEM_STALE_SECONDS=stale)
    drop_caches_dirty()
    log("resume: IDEM killed")
    out["idem_part1"], killed = run_batch(arg_res, env_res, half,
                                          lambda: count_files(dirs["idem_resume"], ".tif"))
    out["idem_after_kill"] = audit(dirs["idem_resume"], reference, names)
    out["idem_temp_after_kill"] = temp_leftovers(dirs["idem_resume"])
    out["idem_inflight_after_kill"] = ledger_query(
        res_dsn, "SELECT count(*) FROM idem.ledger WHERE completed_at IS NULL")[0][0]
    # Both resumes start from this killed state: the tiles, temp dirs and ledger files are
    # copied aside (mtimes kept) and put back between them. The pending resume goes first, while
    # the killed workers' leases may still be live, as for a user resuming at once.
    ledger_file = res_dsn[len("sqlite:"):]
    state = [dirs["idem_resume"]] + [ledger_file + suffix for suffix in ("", "-wal", "-shm")]
    snapshot = os.path.join(base, "idem_resume.killed")
    snapshot_state(state, snapshot)
    commands = os.path.join(base, "idem_resume.commands")
    write_commands(commands, src, tiles, dirs["idem_resume"])
    printed = os.path.join(base, "idem_resume.pending")
    drop_caches_dirty()
    log("resume: IDEM resumed through gdal-idem pending")
    out["pending_part2"] = run_pending_batch(commands, env_res, printed)
    with open(printed) as f:
        out["pending_printed"] = sum(1 for _ in f)
    with open(printed + ".count") as f:
        out["pending_count"] = f.read().strip().splitlines()[-1]
    out["pending_after_resume"] = audit(dirs["idem_resume"], reference, names)
    out["pending_temp_after_resume"] = temp_leftovers(dirs["idem_resume"])
    out["pending_rows"] = ledger_query(res_dsn, "SELECT count(*), sum(attempt), "
                                       "sum(CASE WHEN completed_at IS NOT NULL THEN 1 ELSE 0 END) "
                                       "FROM idem.ledger")[0]
    # pending over the whole completed batch: its cost per done line, and nothing left to print
    pending_all = []
    for _ in range(3):
        seconds, err = timed([GDAL_IDEM, "pending", "--count", commands], env_res)
        pending_all.append(seconds)
    out["pending_all"] = pending_all
    out["pending_all_count"] = err.strip().splitlines()[-1]
    restore_state(state, snapshot)
    shutil.rmtree(snapshot)
    drop_caches_dirty()
    log("resume: IDEM rerun, same command again")
    out["idem_part2"], _ = run_batch(arg_res, env_res)
    out["idem_after_resume"] = audit(dirs["idem_resume"], reference, names)
    out["idem_temp_after_resume"] = temp_leftovers(dirs["idem_resume"])
    attempts = ledger_query(res_dsn, "SELECT count(*), sum(attempt), "
                            "sum(CASE WHEN completed_at IS NOT NULL THEN 1 ELSE 0 END) "
                            "FROM idem.ledger")[0]
    out["idem_rows"] = attempts

    # c. plain gdalwarp killed at about half, then everything again
    arg_plain = os.path.join(base, "plain.args")
    write_arglist(arg_plain, src, tiles, dirs["plain"], False)
    drop_caches_dirty()
    log("resume: plain killed")
    out["plain_part1"], _ = run_batch(arg_plain, env_with(), half,
                                      lambda: count_files(dirs["plain"], ".tif"))
    out["plain_after_kill"] = audit(dirs["plain"], reference, names)
    drop_caches_dirty()
    log("resume: plain naive rerun")
    out["plain_rerun"], _ = run_batch(arg_plain, env_with())
    out["plain_after_rerun"] = audit(dirs["plain"], reference, names)

    # d. gdal2tiles.py: clean run (reference), killed run, --resume
    drop_caches_dirty()
    log("resume: gdal2tiles clean")
    out["g2t_clean"], _, g2t_args = run_gdal2tiles(src, dirs["g2t_clean"])
    g2t_names = tree_files(dirs["g2t_clean"], ".png")
    g2t_ref = reference_checksums(dirs["g2t_clean"], g2t_names)
    drop_caches_dirty()
    log("resume: gdal2tiles killed")
    out["g2t_part1"], _, _ = run_gdal2tiles(src, dirs["g2t_resume"], kill_at=len(g2t_names) // 2)
    out["g2t_after_kill"] = audit(dirs["g2t_resume"], g2t_ref, g2t_names)
    drop_caches_dirty()
    log("resume: gdal2tiles --resume")
    out["g2t_part2"], _, g2t_resume_args = run_gdal2tiles(src, dirs["g2t_resume"], resume=True)
    out["g2t_after_resume"] = audit(dirs["g2t_resume"], g2t_ref, g2t_names)

    idem_total = out["idem_part1"] + out["idem_part2"]
    pending_total = out["idem_part1"] + out["pending_part2"]
    pending_ratio = pending_total / out["idem_full"]
    plain_total = out["plain_part1"] + out["plain_rerun"]
    g2t_total = out["g2t_part1"] + out["g2t_part2"]
    ratio = idem_total / out["idem_full"]

    def fmt_audit(a):
        ok, corrupt, missing = a
        return f"{ok} ok, **{corrupt} corrupt**, {missing} missing"

    w = lambda s: s.replace(WORK, "$WORK")
    with open(arg_full) as f:
        example = f.readline().strip()
    lines = [
        "### 3. Resume of a killed batch (issue 7)",
        "",
        f"{n} zoom-{ZOOM} XYZ tiles (all the tiles of a {gdal.Open(src).RasterXSize}-pixel-square "
        f"UTM crop of the source), one `gdalwarp` per tile: `xargs -P 2 -L 1 gdalwarp < ARGS`, "
        f"ARGS lines like `{w(example)}`. IDEM runs use an SQLite ledger and "
        f"IDEM_STALE_SECONDS={stale} (the lease of a killed worker's claim; the rerun meets those "
        "tiles after its skipping half, by when the lease has expired). The kill is SIGKILL to "
        f"the whole process group once {half} tiles exist at their final paths.",
        "",
        "| approach | first part (s) | rerun (s) | total (s) | total / IDEM uninterrupted |",
        "|---|---:|---:|---:|---:|",
        f"| IDEM uninterrupted | {out['idem_full']:.1f} | – | {out['idem_full']:.1f} | 1.00 |",
        f"| IDEM killed, same command again | {out['idem_part1']:.1f} | {out['idem_part2']:.1f} | "
        f"{idem_total:.1f} | **{ratio:.2f}** (target <= 1.10: {met(ratio <= 1.10)}) |",
        f"| IDEM killed, resumed through `gdal-idem pending` | {out['idem_part1']:.1f} | "
        f"{out['pending_part2']:.1f} | {pending_total:.1f} | **{pending_ratio:.2f}** "
        f"(target <= 1.10: {met(pending_ratio <= 1.10)}) |",
        f"| plain gdalwarp -of GTiff killed, naive rerun of everything | {out['plain_part1']:.1f} | "
        f"{out['plain_rerun']:.1f} | {plain_total:.1f} | {plain_total / out['idem_full']:.2f} |",
        f"| gdal2tiles.py killed, then --resume | {out['g2t_part1']:.1f} | {out['g2t_part2']:.1f} | "
        f"{g2t_total:.1f} | {g2t_total / out['idem_full']:.2f} |",
        "",
        f"Plain gdalwarp uninterrupted is the naive rerun itself: {out['plain_rerun']:.1f} s, so "
        f"IDEM costs {1000 * (out['idem_full'] - out['plain_rerun']) / n:.1f} ms per tile of "
        f"wall time at -P 2 ({out['idem_full'] / out['plain_rerun']:.2f}x). gdal2tiles "
        f"(`{w(' '.join(g2t_resume_args))}`) is one Python process pool reading the source "
        f"once, not a process per tile, and writes {len(g2t_names)} PNG tiles with alpha: its time "
        "is what a tiler without per-tile processes costs, not the same work.",
        "",
        f"Both IDEM resumes start from the same killed state (tiles, temp dirs and ledger copied "
        f"aside after the kill, mtimes kept, and put back between them; the pending resume runs "
        f"first, while the killed claims' leases may still be live). The pending resume is the "
        f"recipe of docs/recipes.md on the batch as command lines (`gdalwarp -q -overwrite ...` "
        f"per line): `gdal-idem pending --count CMDS | xargs -d '\\n' -P 2 -I{{}} sh -c '{{}}'`; "
        f"its rerun time includes `pending` itself, which printed {out['pending_printed']} of "
        f"{n} lines (`{out['pending_count']}`)" +
        (f"; the {out['idem_inflight_after_kill']} claim(s) the kill left in flight come first "
         f"among them, so the rerun starts by waiting out their {stale} s lease"
         if out["idem_inflight_after_kill"] else "") +
        f". `gdal-idem pending` over the whole completed batch afterwards: "
        f"{spread(out['pending_all'], fmt='{:.2f}', unit=' s')} for {n} lines, "
        f"{1000 * med(out['pending_all']) / n:.1f} ms a line (`{out['pending_all_count']}`).",
        "",
        "Correctness (tiles that GDAL cannot open or whose checksums differ from a clean run of "
        "the same approach):",
        "",
        "| approach | right after the kill | after the rerun |",
        "|---|---|---|",
        f"| IDEM | {fmt_audit(out['idem_after_kill'])}; {out['idem_temp_after_kill']} temp "
        f"dirs, {out['idem_inflight_after_kill']} claims in flight | "
        f"{fmt_audit(out['idem_after_resume'])}; {out['idem_temp_after_resume']} temp dirs left |",
        f"| IDEM through gdal-idem pending | (the same killed state) | "
        f"{fmt_audit(out['pending_after_resume'])}; {out['pending_temp_after_resume']} temp dirs "
        f"left; ledger {out['pending_rows'][0]} rows, {out['pending_rows'][2]} completed, "
        f"{out['pending_rows'][1]} attempts |",
        f"| plain gdalwarp | {fmt_audit(out['plain_after_kill'])} (a skip-if-exists rerun "
        f"keeps these) | {fmt_audit(out['plain_after_rerun'])} (everything redone) |",
        f"| gdal2tiles.py --resume | {fmt_audit(out['g2t_after_kill'])} | "
        f"{fmt_audit(out['g2t_after_resume'])} |",
        "",
        f"IDEM ledger after the rerun: {out['idem_rows'][0]} rows, {out['idem_rows'][2]} "
        f"completed, {out['idem_rows'][1]} attempts in all (the extra attempts are the tiles "
        "the kill interrupted). Temp dirs left by the kill are `.idem-tmp-*` beside the "
        "outputs (never at a final path); `gdal-idem reap` removes them.",
    ]
    write_section("e2e-resume", lines)
    with open(os.path.join(WORK, "resume.json"), "w") as f:
        json.dump({"src": src, "root": dirs["idem_full"], "dsn": full_dsn,
                   "tiles": [list(t[:3]) + [list(t[3])] for t in tiles],
                   "per_tile_work_ms": 1000 * out["idem_full"] * 2 / n}, f)


# ------------------------------------------------------------------------------------------
# 2. skip


def skip_in_process(state_path):
    """Child process: gdal.Warp over every completed tile of the resume batch, in one process."""
    state = json.load(open(state_path))
    src = gdal.Open(state["src"])
    gdal.SetConfigOption("IDEM_LEDGER", state["dsn"])
    tiles = state["tiles"]
    root = state["root"]
    opts = lambda fmt, bounds, extra=(): gdal.WarpOptions(
        format=fmt, dstSRS="EPSG:3857", resampleAlg="bilinear", outputBounds=bounds,
        width=256, height=256, creationOptions=list(extra))
    # warm: the driver, PROJ, the ledger connection of the first call
    z, x, y, b = tiles[0]
    gdal.Warp(f"/vsiidem/{root}/{z}/{x}/{y}.tif", src, options=opts("IDEM", b, ["FORMAT=GTiff"]))
    # Three passes of each, interleaved; the median pass is reported (one pass over 1,000 tiles
    # takes a few seconds, and a shared machine's speed drifts over that long).
    passes = {}
    for _ in range(3):
        for label in ("idem", "vrt", "open"):
            start = time.perf_counter()
            for z, x, y, b in tiles:
                path = f"{root}/{z}/{x}/{y}.tif"
                if label == "idem":
                    ds = gdal.Warp("/vsiidem/" + path, src,
                                   options=opts("IDEM", b, ["FORMAT=GTiff"]))
                elif label == "vrt":
                    ds = gdal.Warp("", src, options=opts("VRT", b))
                else:
                    ds = gdal.Open(path)
                assert ds is not None
                ds = None
            passes.setdefault(label, []).append(
                1000 * (time.perf_counter() - start) / len(tiles))
    results = {label: statistics.median(times) for label, times in passes.items()}
    results["idem_passes"] = passes["idem"]
    print(json.dumps(results))


def cmd_skip():
    big = json.load(open(os.path.join(WORK, "overhead.json")))
    res = json.load(open(os.path.join(WORK, "resume.json")))
    sqlite_dsn = "sqlite:" + os.path.join(WORK, "big-ledger.sqlite")
    src, out = big["src"], big["idem_out"]
    # The overhead run left `out` completed in SQLite under its last namespace; complete it once
    # more under a fixed namespace in both ledgers, then rerun that command.
    pg_dsn = pg_new_database("idem_bench_skip")
    init_ledger(pg_dsn)
    rows = []
    for label, dsn in (("SQLite", sqlite_dsn), ("PostgreSQL", pg_dsn)):
        args = ["gdalwarp", "-q", "-overwrite"] + idem_opts(f"skip-{label}") + WARP + \
               [src, "/vsiidem/" + out]
        env = env_with(IDEM_LEDGER=dsn, IDEM_VERBOSE="YES")  # a skip says so on stderr
        work, _ = timed(args, env)
        before = os.stat(out)
        times = []
        for _ in range(5):
            seconds, err = timed(args, env)
            if "IDEM: skipped" not in err:
                raise RuntimeError("rerun did not skip:\n" + err)
            times.append(seconds)
        after = os.stat(out)
        untouched = (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
        rows.append((label, work, times, untouched, args))
    pg_drop_database(pg_dsn)
    version = [timed(["gdalwarp", "--version"], env_with())[0] for _ in range(5)]
    info = [timed(["gdalinfo", "-nomd", "-norat", "-noct", out], env_with())[0] for _ in range(5)]
    redo = med(big["plain_seconds"])
    proc = subprocess.run([sys.executable, __file__, "_skip_in_process",
                           os.path.join(WORK, "resume.json")], env=env_with(CPL_DEBUG="IDEM"),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("in-process skip failed:\n" + proc.stderr[-3000:])
    inproc = json.loads(proc.stdout.strip().splitlines()[-1])
    inproc_skips = proc.stderr.count("IDEM: skipped")
    inproc_steps = {}
    for block in proc.stderr.split("IDEM: skipped")[1:-1]:  # calls after the warm-up
        for k, v in timing_lines(block).items():
            inproc_steps.setdefault(k, []).append(v)
    w = lambda s: s.replace(WORK, "$WORK")
    lines = [
        "### 2. Skipping completed work (issue 7)",
        "",
        f"Rerun of the completed 200 MB warp, the same command again "
        f"(`{w(' '.join(rows[0][4]))}`), 5 runs each; redoing it is the plain GTiff warp of 1a, "
        f"median {redo:.2f} s.",
        "",
        "| ledger | skip (s) | redo / skip | target >= 20x | output untouched (inode, mtime) |",
        "|---|---:|---:|:--|:--|",
    ]
    for label, work, times, untouched, _ in rows:
        factor = redo / med(times)
        lines.append(f"| {label} | {spread(times, fmt='{:.3f}')} | {factor:.0f}x | "
                     f"{met(factor >= 20)} | {'yes' if untouched else 'NO'} |")
    per = inproc["idem"]
    lines += [
        "",
        f"Floor of a skip through the gdalwarp command: `gdalwarp --version` (process start, "
        f"GDAL and plugin registration) {spread(version, fmt='{:.3f}', unit=' s')}; "
        f"`gdalinfo` of the output (start + open) {spread(info, fmt='{:.3f}', unit=' s')}.",
        "",
        f"In one process (`gdal.Warp(\"/vsiidem/...\", src_ds, format=\"IDEM\")` over the "
        f"{len(res['tiles'])} completed tiles of the resume batch, SQLite ledger, source dataset "
        f"opened once): **{per:.2f} ms per tile** (target < 2 ms: {met(per < 2)}; median of 3 "
        f"passes: {', '.join(f'{t:.2f}' for t in inproc['idem_passes'])}; {inproc_skips} of "
        f"{3 * len(res['tiles']) + 1} calls printed `IDEM: skipped`). Floor: the "
        f"same gdal.Warp to an in-memory VRT (GDAL's warp setup: transformer, output "
        f"extent, no IDEM) {inproc['vrt']:.2f} ms per tile; gdal.Open of a tile "
        f"{inproc['open']:.2f} ms. A tile's work (the uninterrupted batch, per process) was "
        f"about {res['per_tile_work_ms']:.0f} ms.",
        "",
        "Steps of an in-process skip (driver `timing:` lines, median ms): " +
        ", ".join(f"{k} {med(v):.2f}" for k, v in inproc_steps.items()) +
        " (the rest of a call is GDAL's own warp setup and VRT serialisation).",
    ]
    write_section("e2e-skip", lines)


# ------------------------------------------------------------------------------------------
# 4. contention


def cmd_contention():
    res = json.load(open(os.path.join(WORK, "resume.json")))
    src = res["src"]
    tiles = [tuple(t[:3]) + (tuple(t[3]),) for t in res["tiles"]][:64]
    base = os.path.join(WORK, "contention")
    shutil.rmtree(base, ignore_errors=True)
    workers = 8

    def run_workers(root, plans, env, idem):
        errs = [[] for _ in plans]

        def worker(i):
            for tile in plans[i]:
                dst = tile_path(root, tile)
                args = ["gdalwarp", "-q", "-overwrite"] + \
                    (idem_opts() if idem else ["-of", "GTiff"]) + \
                    tile_args(src, tile[3], ("/vsiidem/" if idem else "") + dst)
                _, err = timed(args, env)
                errs[i].append(err)
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(plans))]
        drop_caches_dirty()
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start, errs

    def idem_case(label, plans):
        dsn = pg_new_database("idem_bench_cont")
        init_ledger(dsn)
        root = os.path.join(base, label)
        make_tile_dirs(root, tiles)
        env = env_with(IDEM_LEDGER=dsn, CPL_DEBUG="IDEM")
        seconds, errs = run_workers(root, plans, env, True)
        work = sum(e.count("timing: materialise") for es in errs for e in es)
        skips = sum(e.count("IDEM: skipped") for es in errs for e in es)
        waits = sum(e.count("IDEM: waiting for") for es in errs for e in es)
        rows, attempts, multi = pg_query(dsn, "SELECT count(*), coalesce(sum(attempt), 0), "
                                         "count(*) FILTER (WHERE attempt > 1) FROM idem.ledger")[0]
        tiles_done = len(set(t[:3] for p in plans for t in p))
        pg_drop_database(dsn)
        return dict(seconds=seconds, work=work, skips=skips, waits=waits, rows=rows,
                    attempts=attempts, multi=multi, tiles=tiles_done)

    rng = random.Random(11)
    shuffled = [rng.sample(tiles, len(tiles)) for _ in range(workers)]
    log("contention: 8 IDEM workers, each over all 64 tiles in its own random order")
    a = idem_case("shuffled", shuffled)
    same_tiles = tiles[:8]
    log("contention: 8 IDEM workers, same 8 tiles in the same order")
    b = idem_case("same-order", [same_tiles] * workers)
    plain_root = os.path.join(base, "plain")
    make_tile_dirs(plain_root, tiles)
    log("contention: 8 plain workers on disjoint tiles")
    plain_seconds, _ = run_workers(plain_root, [tiles[i::workers] for i in range(workers)],
                                   env_with(), False)

    def row(label, r):
        dup = r["work"] - r["tiles"]
        return (f"| {label} | {r['seconds']:.1f} | {r['work']} warps for {r['tiles']} tiles | "
                f"{dup} ({met(dup == 0)}) | {r['rows']} rows, {r['attempts']} attempts, "
                f"{r['multi']} with attempt > 1 | {r['skips']} skips, {r['waits']} waits |")
    lines = [
        "### 4. Contention (issue 4)",
        "",
        "8 worker threads, each running `gdalwarp -q -overwrite -of IDEM -co FORMAT=GTiff ... "
        "/vsiidem/TILE.tif` processes one after another, one PostgreSQL ledger (IDEM_ON_BUSY=WAIT, "
        "default lease), 2 cores.",
        "",
        "| case | wall (s) | work done | duplicate work (target 0) | ledger | skips / waits |",
        "|---|---:|---|---|---|---|",
        row("IDEM: 8 workers x the same 64 tiles, each in its own random order", a),
        row("IDEM: 8 workers x the same 8 tiles in the same order (worst case)", b),
        f"| plain GTiff: 8 workers x 8 disjoint tiles (the 64 tiles once) | {plain_seconds:.1f} | "
        "64 warps | – | – | – |",
        "",
        f"Wall time, IDEM with every worker offered every tile / plain on disjoint tiles: "
        f"**{a['seconds'] / plain_seconds:.2f}x** (each IDEM worker starts 64 processes, the "
        "plain ones 8; a skip still costs a process start). A waiting worker polls the holder "
        "every clamp(lease left, 0.2 s, 2 s), i.e. every 2 s with the default 300 s lease, "
        "which is what the same-order case pays.",
    ]
    write_section("e2e-contention", lines)


# ------------------------------------------------------------------------------------------
# 5. scale


def cmd_sources():
    big = big_source()
    batch = batch_source()
    log(f"sources: {big} ({len(tiles_of(big, ZOOM))} z{ZOOM} tiles), {batch} "
        f"({len(tiles_of(batch, ZOOM))} z{ZOOM} tiles)")


def run_with_progress(cmd, env, budget):
    """Run a gdal-idem command showing its progress bar (GDAL's `0...10...20...` marks, one per
    2.5%, on stderr) for at most `budget` seconds. Returns (seconds, finished, returncode, marks),
    marks being (seconds since start, fraction done) of each mark as it appeared."""
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    start = time.perf_counter()
    marks = []

    def read_marks():
        tick, previous_digit = -1, False
        while True:
            byte = proc.stderr.read(1)
            if not byte:
                return
            char = byte.decode(errors="replace")
            new_mark = char == "." or (char.isdigit() and not previous_digit)
            previous_digit = char.isdigit()
            if new_mark:
                tick += 1
                marks.append((time.perf_counter() - start, tick / 40))

    reader = threading.Thread(target=read_marks)
    reader.start()
    try:
        proc.wait(timeout=budget)
        finished = True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        finished = False
    seconds = time.perf_counter() - start
    reader.join()
    return seconds, finished, proc.returncode, marks


def cmd_scale(db_name):
    """db_name: a PostgreSQL ledger (in the with-postgres cluster) already holding millions of
    completed rows: bench/ledger.sh's, kept with IDEM_BENCH_KEEP_DB=1."""
    db_dsn = pg_dsn_for(db_name)
    n = pg_query(db_dsn, "SELECT count(*) FROM idem.ledger")[0][0]
    size = pg_query(db_dsn, "SELECT pg_total_relation_size('idem.ledger'), "
                    "pg_relation_size('idem.ledger'), pg_indexes_size('idem.ledger')")[0]
    claim = subprocess.run([os.path.join(BUILD, "bench", "claim_bench"), db_dsn, "2000"],
                           capture_output=True, text=True, check=True).stdout
    c = dict(kv.split("=") for kv in claim.split())
    # Realistic rows: the work_json, tile and footprint of a real tile row, 100,000 times.
    sample = 100_000
    real_dsn = pg_new_database("idem_bench_rowsize")
    init_ledger(real_dsn)
    src = batch_source()
    z, x, y, b = tiles_of(src, ZOOM)[0]
    tmp_root = os.path.join(WORK, "rowsize")
    os.makedirs(os.path.join(tmp_root, str(z), str(x)), exist_ok=True)
    timed(["gdalwarp", "-q", "-overwrite"] + idem_opts() +
          tile_args(src, b, f"/vsiidem/{tmp_root}/{z}/{x}/{y}.tif"),
          env_with(IDEM_LEDGER=real_dsn))
    json_len = pg_query(real_dsn, "SELECT length(work_json) FROM idem.ledger")[0][0]
    before = pg_query(real_dsn, "SELECT pg_total_relation_size('idem.ledger')")[0][0]
    pg_query(real_dsn, f"""
        INSERT INTO idem.ledger (work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at,
          lease_expires_at, completed_at, attempt, claim_token, worker_host, worker_pid,
          output_uri, output_size, output_mtime_ns, work_json, footprint)
        SELECT encode(sha256(('k' || g)::bytea), 'hex'), l.namespace, l.layer, l.tile_z,
               l.tile_x + g, l.tile_y, now(), now(), now(), 1, md5(g::text) || md5(g::text),
               l.worker_host, l.worker_pid, l.output_uri || '.' || g, l.output_size,
               l.output_mtime_ns, replace(l.work_json, '"xsize":256', '"xsize":' || (256 + g)),
               l.footprint
        FROM idem.ledger l, generate_series(1, {sample}) g""")
    pg_query(real_dsn, "VACUUM ANALYZE idem.ledger")
    after = pg_query(real_dsn, "SELECT pg_total_relation_size('idem.ledger')")[0][0]
    real_per_million = (after - before) / sample * 1e6

    def cli(args, timeout, dsn=db_dsn):
        cmd = [GDAL_IDEM, "--ledger", dsn, "-q"] + args
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=env_with())
        except subprocess.TimeoutExpired:
            return None, f"stopped after {timeout} s", cmd
        seconds = time.perf_counter() - start
        text = (proc.stdout + proc.stderr).strip()
        if "not available yet" in text or "unknown command" in text:
            return None, "not implemented yet", cmd
        return seconds, f"exit {proc.returncode}: {text.splitlines()[-1] if text else ''}"[:160], cmd

    limit = int(os.environ.get("IDEM_BENCH_CLI_TIMEOUT", "150"))
    small = {}
    for name in ("reap", "verify"):
        small[name] = cli([name, "--dry-run"], limit, real_dsn) if os.path.exists(GDAL_IDEM) \
            else (None, "gdal-idem not built", [])
    pg_drop_database(real_dsn)
    reap = cli(["reap", "--dry-run"], limit) if os.path.exists(GDAL_IDEM) else \
        (None, "gdal-idem not built", [])
    # verify reads every output: at 10M rows that is many minutes, not worth running to the end
    # in every bench run. Its progress bar gives the rate at this size after a short run.
    verify_budget = int(os.environ.get("IDEM_BENCH_VERIFY_SECONDS", "60"))
    verify_cmd = [GDAL_IDEM, "--ledger", db_dsn, "verify", "--dry-run"]
    if not os.path.exists(GDAL_IDEM):
        verify = (None, "gdal-idem not built", [])
    else:
        seconds, finished, rc, marks = run_with_progress(verify_cmd, env_with(), verify_budget)
        if finished:
            verify = (seconds, f"exit {rc}", verify_cmd)
        elif len(marks) >= 2 and marks[-1][1] > 0:
            (t0, _), (t_last, done) = marks[0], marks[-1]
            estimate = t0 + (t_last - t0) / done
            verify = (None, f"stopped after {seconds:.0f} s, {100 * done:.1f}% done by its "
                      f"progress bar ({100 * done:.1f}% at {t_last:.1f} s, 0% at {t0:.1f} s): "
                      f"**about {estimate:.0f} s** for all the rows at that rate", verify_cmd)
        else:
            verify = (None, f"stopped after {seconds:.0f} s, before its progress bar passed "
                      "2.5%", verify_cmd)
    mb = lambda v: v / 1e6
    lines = [
        "### 5. Scale (issue 4)",
        "",
        f"The PostgreSQL ledger of bench/ledger.sh after its lookup benchmark: {n:,} completed "
        f"rows (generate_series, small work_json; see its lookup figure above, not repeated "
        "here).",
        "",
        f"- claim() of a new key through our client, one connection, {c['samples']} claims: "
        f"median {float(c['claim_median_ms']):.3f} ms, p99 {float(c['claim_p99_ms']):.3f} ms, "
        f"max {float(c['claim_max_ms']):.3f} ms; complete(): median "
        f"{float(c['complete_median_ms']):.3f} ms, p99 {float(c['complete_p99_ms']):.3f} ms "
        f"(target < 1 ms as for lookup: {met(float(c['claim_median_ms']) < 1)}).",
        f"- Ledger size at {n:,} rows: {mb(size[0]):,.0f} MB in all (heap {mb(size[1]):,.0f} MB, "
        f"indexes {mb(size[2]):,.0f} MB) = **{mb(size[0]) / (n / 1e6):,.0f} MB per million "
        "rows** with these minimal rows.",
        f"- With real rows (the {json_len}-byte work_json, tile and footprint of a real tile row, "
        f"{sample:,} rows inserted then VACUUM ANALYZE): **{mb(real_per_million):,.0f} MB per "
        "million rows**.",
    ]
    for name, (seconds, note, cmd) in (("reap", reap), ("verify", verify)):
        shown = " ".join(cmd).replace(db_dsn, "DSN").replace(GDAL_IDEM, "gdal-idem") if cmd \
            else f"gdal-idem {name}"
        if seconds is None:
            lines.append(f"- `{shown}` at {n:,} rows: {note}.")
            if note == "not implemented yet":
                lines.append(f"- TODO: `gdal-idem {name}` is not implemented yet (src/cli/"
                             f"{name}_command.cpp is a placeholder); rerun `make bench` once "
                             "it is.")
        else:
            lines.append(f"- `{shown}` at {n:,} rows: **{seconds:.1f} s** ({note}).")
        s_seconds, s_note, _ = small[name]
        if s_seconds is not None:
            lines.append(f"  The same at {sample + 1:,} real rows: {s_seconds:.1f} s "
                         f"({s_note}); linear extrapolation to {n:,} rows: "
                         f"{s_seconds * n / (sample + 1):.0f} s.")
        if seconds is None and note.startswith("stopped"):
            knob = "IDEM_BENCH_VERIFY_SECONDS" if name == "verify" else "IDEM_BENCH_CLI_TIMEOUT"
            lines.append(f"  To time `gdal-idem {name}` to the end at {n:,} rows, raise {knob} "
                         f"(seconds; a quiet machine is best).")
    lines.append("  (The generated rows point at outputs that do not exist, so `verify` finds "
                 "every one missing; `--dry-run` keeps the rows.)")
    write_section("e2e-scale", lines)


def cmd_finish(load_before, load_after, elapsed, failed="", step_times=""):
    steps = [item.split("=", 1) for item in step_times.split() if "=" in item]
    write_section("e2e-end", [
        f"bench/run took {float(elapsed) / 60:.1f} min" +
        (" (" + ", ".join(f"{name} {int(seconds) // 60}m{int(seconds) % 60:02d}s"
                          for name, seconds in steps) + ")" if steps else "") +
        f". Load average (1, 5, 15 min) before: {load_before}; after: {load_after}" +
        (" — a shared, loaded machine (other builds and tests ran on the same 2 cores): the "
         "absolute times above are inflated and noisy; rerun `make bench` on a quiet machine "
         "for reference figures." if max(float(load_before.split()[0]),
                                          float(load_after.split()[0])) > 1.0 else ".") +
        (f" **Benchmarks that failed to run: {failed}.**" if failed.strip() else "")
    ])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    command, args = sys.argv[1], sys.argv[2:]
    os.makedirs(WORK, exist_ok=True)
    if command == "_skip_in_process":
        return skip_in_process(*args)
    handlers = {"machine": cmd_machine, "sources": cmd_sources, "overhead": cmd_overhead, "tiles": cmd_tiles,
                "resume": cmd_resume, "skip": cmd_skip, "contention": cmd_contention,
                "scale": cmd_scale, "finish": cmd_finish}
    if command not in handlers:
        sys.exit(__doc__)
    start = time.perf_counter()
    handlers[command](*args)
    log(f"{command}: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
