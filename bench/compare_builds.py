#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two builds of the IDEM plugin on section 6's workload (bench/RESULTS.md: zoom-14 tiles to
/vsis3/ on s3rver, one gdalwarp process per tile), paired: each tile is warped through build A
and through build B one right after the other (which first drawn for each pair), to keys of
their own, so the machine's slow spells fall on both. For a change that must not make a tile
slower (a refactoring): the per-tile times of each build and the paired difference B - A, in
milliseconds, per ledger.

    scripts/with-postgres /usr/bin/python3 bench/compare_builds.py PLUGIN_DIR_A PLUGIN_DIR_B

PLUGIN_DIR_* hold gdal_IDEM.so (a build's gdalplugins). Knobs: IDEM_BENCH_TILES (24),
IDEM_BENCH_TILE_ROUNDS (2), IDEM_BENCH_SIZE (8192), IDEM_BENCH_WORK. Prints a Markdown table."""

import os
import random
import shutil
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "autotest"))

import idem_bench as B  # noqa: E402
from s3server import S3Server  # noqa: E402

BUCKET = "idem-compare"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    builds = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
    for path in builds.values():
        if not os.path.exists(os.path.join(path, "gdal_IDEM.so")):
            sys.exit(f"compare_builds: no gdal_IDEM.so in {path}")
    src = B.big_source()
    tiles = random.Random(11).sample(B.tiles_of(src, B.ZOOM),
                                     min(B.TILES_PER_BATCH, len(B.tiles_of(src, B.ZOOM))))
    server_dir = os.path.join(B.WORK, "compare-s3rver")
    shutil.rmtree(server_dir, ignore_errors=True)
    server = S3Server(server_dir, buckets=[BUCKET]).start()
    local_tmp = os.path.join(B.WORK, "compare-cpl-tmp")
    os.makedirs(local_tmp, exist_ok=True)
    ledgers = [("SQLite ledger", "sqlite:" + os.path.join(B.WORK, "compare-ledger.sqlite"))]
    bouncer = None
    pg_dsn = None
    if os.environ.get("IDEM_TEST_PG_DSN"):
        pg_dsn = B.pg_new_database("idem_bench_compare")
        bouncer = B.start_pgbouncer()
        ledgers += [("PostgreSQL ledger", pg_dsn),
                    ("PostgreSQL through PgBouncer (Unix socket)", bouncer.socket_dsn_for(pg_dsn))]
    try:
        def warp(build, dsn, prefix, tile):
            z, x, y, bounds = tile
            env = B.env_with(GDAL_DRIVER_PATH=builds[build], IDEM_LEDGER=dsn,
                             CPL_TMPDIR=local_tmp, **server.config())
            seconds, _, _ = B.timed_with_cpu(
                ["gdalwarp", "-q", "-overwrite"] + B.idem_opts(prefix.replace("-", "")) +
                B.tile_args(src, bounds, f"/vsiidem//vsis3/{BUCKET}/{prefix}/{z}/{x}/{y}.tif"),
                env)
            return seconds

        B.log("compare: warm-up (and each ledger's schema)")
        warm = uuid.uuid4().hex[:8]
        for _, dsn in ledgers:
            for build in builds:
                for tile in tiles[:3]:
                    warp(build, dsn, f"warm-{build}-{warm}", tile)
        times = {name: {"A": [], "B": []} for name, _ in ledgers}
        draw = random.Random(8)
        for r in range(B.TILE_ROUNDS):
            tag = uuid.uuid4().hex[:8]
            for k in draw.sample(range(len(ledgers)), len(ledgers)):
                name, dsn = ledgers[k]
                for tile in tiles:
                    order = ["A", "B"] if draw.random() < 0.5 else ["B", "A"]
                    for build in order:
                        times[name][build].append(warp(build, dsn, f"{build}-{tag}-{k}", tile))
                B.log(f"  round {r + 1}: {name} done")
    finally:
        server.stop()
        if bouncer:
            bouncer.stop()
        if pg_dsn:
            B.pg_drop_database(pg_dsn)

    print(f"{len(tiles)} tiles x {B.TILE_ROUNDS} rounds per ledger; A = {builds['A']}, "
          f"B = {builds['B']}\n")
    print("| ledger | A, ms per tile | B, ms per tile | B - A, ms (paired) | B / A, median of "
          "the pairs |")
    print("|---|---:|---:|---:|---:|")
    for name, by_build in times.items():
        a = [1000 * s for s in by_build["A"]]
        b = [1000 * s for s in by_build["B"]]
        diffs = [y - x for x, y in zip(a, b)]
        ratios = [y / x for x, y in zip(a, b)]
        print(f"| {name} | {B.spread(a, '{:.0f}')} | {B.spread(b, '{:.0f}')} | "
              f"{B.spread(diffs, '{:.1f}')} | {B.med(ratios):.3f} |")


if __name__ == "__main__":
    main()
