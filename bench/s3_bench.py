#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Object storage (issue 8): per-tile cost of IDEM publishing to /vsis3/ against plain gdalwarp
writing to /vsis3/ on the same S3-compatible server (s3rver on loopback, tools/s3rver), and the
cost of a skip (requests sent and time). Writes the `e2e-s3` section of bench/RESULTS.md.

Run by bench/run (step s3); alone: IDEM_TEST_PG_DSN=... /usr/bin/python3 bench/s3_bench.py.
Knobs: IDEM_BENCH_TILES (tiles per batch, 24), IDEM_BENCH_TILE_ROUNDS (2), IDEM_BENCH_SIZE."""

import os
import random
import shutil
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "autotest"))

import idem_bench as B  # noqa: E402
from s3server import S3Server  # noqa: E402

BUCKET = "idem-bench"


# A process's first connection to the ledger (libpq, through psycopg), timed inside the process.
CONNECT_PROBE = ("import sys, time, psycopg\n"
                 "start = time.perf_counter()\n"
                 "psycopg.connect(sys.argv[1]).close()\n"
                 "print(time.perf_counter() - start)\n")


def connection_times(bouncer, dsn, processes=40):
    """Median first-connection time (ms) of a new process, for the ways to reach PgBouncer that
    docs/operations.md compares."""
    tcp = bouncer.dsn_for(dsn)
    variants = [("Unix socket", bouncer.socket_dsn_for(dsn)),
                ("TCP loopback, gssencmode=disable (what gdal-idem uses)",
                 tcp + " gssencmode=disable"),
                ("TCP loopback, libpq's defaults", tcp)]
    times = {name: [] for name, _ in variants}
    for _ in range(processes):
        for name, target in variants:
            out = subprocess.run([sys.executable, "-c", CONNECT_PROBE, target], check=True,
                                 capture_output=True, text=True).stdout
            times[name].append(1000 * float(out))
    return [(name, B.med(values)) for name, values in times.items()]


def main():
    src = B.big_source()
    all_tiles = B.tiles_of(src, B.ZOOM)
    tiles = random.Random(11).sample(all_tiles, min(B.TILES_PER_BATCH, len(all_tiles)))
    n = len(tiles)
    server_dir = os.path.join(B.WORK, "s3rver")
    shutil.rmtree(server_dir, ignore_errors=True)
    server = S3Server(server_dir, buckets=[BUCKET]).start()
    local_tmp = os.path.join(B.WORK, "s3-cpl-tmp")
    os.makedirs(local_tmp, exist_ok=True)
    sqlite_dsn = "sqlite:" + os.path.join(B.WORK, "s3-ledger.sqlite")
    pg_dsn = B.pg_new_database("idem_bench_s3") if os.environ.get("IDEM_TEST_PG_DSN") else None
    # The same through PgBouncer to a database where commits do not wait for the WAL flush
    # (docs/operations.md, "PostgreSQL connection costs": synchronous_commit = off).
    async_dsn = B.pg_new_database("idem_bench_s3_async") if pg_dsn else None
    if async_dsn:
        database = async_dsn.split("dbname=")[1].split()[0]
        B.pg_query(async_dsn, f'ALTER DATABASE "{database}" SET synchronous_commit = off')
    for dsn in filter(None, (sqlite_dsn, pg_dsn, async_dsn)):
        B.init_ledger(dsn)
    bouncer = B.start_pgbouncer() if pg_dsn else None
    # Through its Unix socket, as docs/operations.md recommends for a PgBouncer on each worker.
    pooled_dsn = bouncer.socket_dsn_for(pg_dsn) if bouncer else None
    pooled_async_dsn = bouncer.socket_dsn_for(async_dsn) if bouncer else None
    base_env = B.env_with(CPL_TMPDIR=local_tmp, **server.config())
    try:
        def uri(prefix, tile):
            z, x, y, _ = tile
            return f"/vsis3/{BUCKET}/{prefix}/{z}/{x}/{y}.tif"

        plain_env = dict(base_env, CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE="YES")

        def plain_tile(prefix, tile):
            """(seconds, CPU seconds) of one plain process."""
            seconds, cpu, _ = B.timed_with_cpu(["gdalwarp", "-q", "-overwrite", "-of", "GTiff"] +
                                               B.tile_args(src, tile[3], uri(prefix, tile)),
                                               plain_env)
            return seconds, cpu

        def idem_tile(dsn, prefix, namespace, tile, extra=None):
            env = dict(base_env, IDEM_LEDGER=dsn, CPL_DEBUG="IDEM", **(extra or {}))
            seconds, cpu, err = B.timed_with_cpu(
                ["gdalwarp", "-q", "-overwrite"] + B.idem_opts(namespace) +
                B.tile_args(src, tile[3], "/vsiidem/" + uri(prefix, tile)), env)
            return seconds, cpu, B.timing_lines(err)

        def idem_batch(dsn, prefix, namespace, extra):
            start = time.perf_counter()
            for tile in tiles:
                idem_tile(dsn, prefix, namespace, tile, extra)
            return time.perf_counter() - start

        # (name, DSN, IDEM's extra configuration). IDEM_DURABLE_CLAIM=YES: the claim waits for
        # the server's WAL flush before the work, as every claim did before claims were
        # confirmed during the work (docs/operations.md).
        ledgers = [(name, dsn, extra) for name, dsn, extra in (
            ("SQLite ledger", sqlite_dsn, {}),
            ("PostgreSQL ledger", pg_dsn, {}),
            ("PostgreSQL through PgBouncer (Unix socket)", pooled_dsn, {}),
            ("PostgreSQL through PgBouncer (Unix socket), IDEM_DURABLE_CLAIM=YES", pooled_dsn,
             {"IDEM_DURABLE_CLAIM": "YES"}),
            ("PostgreSQL through PgBouncer (Unix socket), synchronous_commit = off",
             pooled_async_dsn, {}))
            if dsn]
        B.log("s3: warm-up")
        warm = uuid.uuid4().hex[:8]
        for tile in tiles[:4]:
            plain_tile("warm-" + warm, tile)
            for k, (_, dsn, extra) in enumerate(ledgers):
                idem_tile(dsn, f"warm-idem-{warm}-{k}", f"warm{warm}{k}", tile, extra)
        # Pairs: one tile warped by plain gdalwarp and by IDEM, one right after the other (which
        # first is drawn for each pair). The VM's slow spells last seconds, so pairs this close
        # share them; whole batches (seconds apart) did not. Each ledger gets a run of pairs of
        # its own: mixed in one sequence, whichever process followed a direct PostgreSQL run
        # paid for the server backend it left exiting.
        # [(idem s, plain s, steps, idem CPU s, plain CPU s)] per pair
        results = {name: [] for name, _, _ in ledgers}
        round_ratios = {name: [] for name, _, _ in ledgers}
        base_times = []
        draw = random.Random(8)
        for r in range(B.TILE_ROUNDS):
            tag = uuid.uuid4().hex[:8]
            for k in draw.sample(range(len(ledgers)), len(ledgers)):
                # Keys and objects of their own per ledger: PostgreSQL and PgBouncer share a
                # database, and no run may find another's output.
                name, dsn, extra = ledgers[k]
                ratios = []
                for tile in tiles:
                    if draw.random() < 0.5:
                        plain_seconds, plain_cpu = plain_tile(f"plain-{tag}-{k}", tile)
                        seconds, cpu, steps = idem_tile(dsn, f"idem-{tag}-{k}", f"s3{tag}{k}",
                                                        tile, extra)
                    else:
                        seconds, cpu, steps = idem_tile(dsn, f"idem-{tag}-{k}", f"s3{tag}{k}",
                                                        tile, extra)
                        plain_seconds, plain_cpu = plain_tile(f"plain-{tag}-{k}", tile)
                    base_times.append(plain_seconds)
                    results[name].append((seconds, plain_seconds, steps, cpu, plain_cpu))
                    ratios.append(seconds / plain_seconds)
                round_ratios[name].append(B.med(ratios))
                B.log(f"  round {r + 1}: {name}: IDEM / plain {round_ratios[name][-1]:.3f}")

        # Skips: the same batch again, after it completed.
        skip_rows = []
        for name, dsn, extra in ledgers:
            tag = uuid.uuid4().hex[:8]
            mark = server.mark()
            first = idem_batch(dsn, "skip-" + tag, "skip" + tag, extra)
            first_requests = len(server.requests_since(mark)) / n
            mark = server.mark()
            again = idem_batch(dsn, "skip-" + tag, "skip" + tag, extra)
            requests = server.requests_since(mark)
            methods = {}
            for method, *_ in requests:
                methods[method] = methods.get(method, 0) + 1
            skip_rows.append((name, first / n, first_requests, again / n, len(requests) / n,
                              methods.get("PUT", 0) + methods.get("POST", 0),
                              methods.get("DELETE", 0)))
        connect_rows = connection_times(bouncer, pg_dsn) if bouncer else []
        plain_rerun = []
        prefix = "plain-rerun-" + uuid.uuid4().hex[:8]
        env = dict(base_env, CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE="YES")
        plain_requests = []
        for _ in range(2):
            mark = server.mark()
            start = time.perf_counter()
            for tile in tiles:
                B.timed(["gdalwarp", "-q", "-overwrite", "-of", "GTiff"] +
                        B.tile_args(src, tile[3], uri(prefix, tile)), env)
            plain_rerun.append(time.perf_counter() - start)
            plain_requests.append(len(server.requests_since(mark)) / n)
    finally:
        server.stop()
        if bouncer:
            bouncer.stop()
        for dsn in filter(None, (pg_dsn, async_dsn)):
            B.pg_drop_database(dsn)

    lines = [
        "### 6. Object storage: tiles to /vsis3/ (issue 8)",
        "",
        f"{n} random zoom-{B.ZOOM} tiles (256x256, EPSG:3857, bilinear) cut from the "
        f"{B.SIZE}x{B.SIZE} UTM source, one `gdalwarp` process each, uploaded to s3rver on "
        "loopback. Plain: `gdalwarp -of GTiff --config CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE "
        "YES ... /vsis3/bucket/z/x/y.tif`; IDEM: `gdalwarp -of IDEM -co FORMAT=GTiff ... "
        "/vsiidem//vsis3/bucket/z/x/y.tif`. Source digest cached; "
        f"{B.TILE_ROUNDS} rounds. In each, for each ledger in turn (shuffled), every tile is "
        "warped by plain gdalwarp and by IDEM one right after the other (which first drawn for "
        "each pair), and each IDEM process is compared with its pair's plain process. "
        "PgBouncer: session mode, `server_reset_query = RESET ALL` (autotest/pgbouncer.py, as "
        "docs/operations.md recommends). `IDEM_DURABLE_CLAIM=YES`: the claim waits for the "
        "server's write-ahead-log flush before the work, where by default it is confirmed "
        "during the work; `synchronous_commit = off`: the database's commits wait for no flush "
        "(docs/operations.md).",
        "",
        f"Plain to /vsis3/: {B.spread([1000 * t for t in base_times], fmt='{:.0f}', unit=' ms')}"
        " per tile (a whole process).",
        "",
        "| variant | ms per tile | overhead per tile (ms, paired) | IDEM / plain, median of "
        "the pairs (range: the rounds' medians) | target ≤ 1.05 |",
        "|---|---:|---:|---:|:--|",
    ]
    for name, runs in results.items():
        ratio = B.med([run[0] / run[1] for run in runs])
        rounds = round_ratios[name]
        lines.append(f"| {name} | {B.spread([1000 * run[0] for run in runs], fmt='{:.0f}')} | "
                     f"{B.spread([1000 * (run[0] - run[1]) for run in runs], fmt='{:.1f}')} | "
                     f"{ratio:.3f} ({min(rounds):.3f}–{max(rounds):.3f}, n={len(runs)}) | "
                     f"{B.met(ratio <= 1.05)} |")
    lines += ["", "CPU time of the same processes (user + system, the kernel's accounting of "
              "each gdalwarp process; waits for the ledger, the store or the disk do not "
              "count), paired the same way:", "",
              "| variant | plain, CPU ms per tile | IDEM, CPU ms per tile | CPU overhead per "
              "tile (ms, paired) | IDEM / plain CPU, median of the pairs |",
              "|---|---:|---:|---:|---:|"]
    for name, runs in results.items():
        lines.append(f"| {name} | {1000 * B.med([run[4] for run in runs]):.1f} | "
                     f"{1000 * B.med([run[3] for run in runs]):.1f} | "
                     f"{B.spread([1000 * (run[3] - run[4]) for run in runs], fmt='{:.1f}')} | "
                     f"{B.med([run[3] / run[4] for run in runs]):.3f} |")
    lines += ["", "Per-tile step times inside the driver (median; ms): the upload is in "
              "heartbeat+commit; complete records the ETag predicted from the uploaded bytes "
              "(no request), and the dataset returned opens the object only if read.", "",
              "| step | " + " | ".join(results) + " |", "|---|" + "---:|" * len(results)]
    for step in B.STEP_ORDER:
        cells = [f"{B.med([run[2].get(step, 0.0) for run in runs]):.2f}"
                 for runs in results.values()]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    if connect_rows:
        lines += ["", "A new process's first connection to PgBouncer (libpq through psycopg, "
                  "median of 40 processes each; docs/operations.md, \"PostgreSQL connection "
                  "costs\"): " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in connect_rows)
                  + "."]
    lines += ["", "Skip: the same batch run again once completed (one process per tile):", "",
              "| ledger | first run, ms per tile | requests per first run | rerun (skip), ms per "
              "tile | requests per skip | PUT/POST in the rerun | DELETE in the rerun |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, first, first_requests, again, requests, writes, deletes in skip_rows:
        lines.append(f"| {name} | {1000 * first:.0f} | {first_requests:.1f} | "
                     f"{1000 * again:.0f} | {requests:.1f} | {writes} | {deletes} |")
    lines += ["", f"Plain gdalwarp to new keys sends {plain_requests[0]:.1f} requests per tile; "
              f"its rerun of the same tiles (uploads again) {plain_requests[1]:.1f}, "
              f"{B.spread([1000 * t / n for t in plain_rerun], fmt='{:.0f}', unit=' ms')} per tile.",
              "", "A skip's requests: gdalwarp's own existence check and pre-delete probe of "
              "the output, IDEM's fingerprint request (GDAL 3.6 sends it as a 16 KB range GET, "
              "not a HEAD) and the open of the output it returns; none writes."]
    B.write_section("e2e-s3", lines)


if __name__ == "__main__":
    main()
