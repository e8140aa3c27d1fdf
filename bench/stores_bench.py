#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Object storage beyond S3 (issue 45): the per-tile cost of IDEM's fenced publish to /vsigs/
(GCS, the tests' store, tools/gcs) and /vsiaz/ (Azurite, tools/azurite) against plain gdalwarp
writing to the same store, paired tile by tile, with the requests each sends (GCS; Azurite keeps
no request log). Writes the `e2e-stores` section of bench/RESULTS.md.

Run by bench/run (step stores); alone: /usr/bin/python3 bench/stores_bench.py.
Knobs: IDEM_BENCH_TILES (tiles per batch, 24), IDEM_BENCH_TILE_ROUNDS (2), IDEM_BENCH_SIZE."""

import os
import random
import shutil
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "autotest"))

import idem_bench as B  # noqa: E402
from azuriteserver import AzuriteServer  # noqa: E402
from gcsserver import GcsServer  # noqa: E402

BUCKET = "idem-bench"


def run_store(label, scheme, server, src, tiles, count_requests):
    """Pairs of (plain, IDEM) processes per tile, TILE_ROUNDS rounds; then a rerun (skips)."""
    local_tmp = os.path.join(B.WORK, f"{scheme}-cpl-tmp")
    os.makedirs(local_tmp, exist_ok=True)
    ledger = "sqlite:" + os.path.join(B.WORK, f"{scheme}-ledger-{uuid.uuid4().hex[:6]}.sqlite")
    B.init_ledger(ledger)
    base_env = B.env_with(CPL_TMPDIR=local_tmp, **server.config())
    plain_env = dict(base_env, CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE="YES")
    idem_env = dict(base_env, IDEM_LEDGER=ledger)

    def uri(prefix, tile):
        z, x, y, _ = tile
        return f"/{scheme}/{BUCKET}/{prefix}/{z}/{x}/{y}.tif"

    def plain(prefix, tile):
        return B.timed(["gdalwarp", "-q", "-overwrite", "-of", "GTiff"] +
                       B.tile_args(src, tile[3], uri(prefix, tile)), plain_env)[0]

    def idem(prefix, tile):
        return B.timed(["gdalwarp", "-q", "-overwrite"] + B.idem_opts(prefix) +
                       B.tile_args(src, tile[3], "/vsiidem/" + uri(prefix, tile)), idem_env)[0]

    B.log(f"{label}: warm-up")
    warm = uuid.uuid4().hex[:8]
    for tile in tiles[:4]:
        plain("warm-plain-" + warm, tile)
        idem("warm-idem-" + warm, tile)
    pairs, round_ratios = [], []
    draw = random.Random(45)
    for r in range(B.TILE_ROUNDS):
        tag = uuid.uuid4().hex[:8]
        ratios = []
        for tile in tiles:
            if draw.random() < 0.5:
                p = plain("plain-" + tag, tile)
                i = idem("idem-" + tag, tile)
            else:
                i = idem("idem-" + tag, tile)
                p = plain("plain-" + tag, tile)
            pairs.append((i, p))
            ratios.append(i / p)
        round_ratios.append(B.med(ratios))
        B.log(f"  {label} round {r + 1}: IDEM / plain {round_ratios[-1]:.3f}")
    # Requests per tile (GCS): a first run of new tiles by each, then IDEM's rerun (skips).
    requests = {}
    if count_requests:
        tag = uuid.uuid4().hex[:8]
        for name, one in (("plain", lambda t: plain("req-plain-" + tag, t)),
                          ("IDEM", lambda t: idem("req-idem-" + tag, t)),
                          ("IDEM rerun (skip)", lambda t: idem("req-idem-" + tag, t))):
            mark = server.mark()
            for tile in tiles:
                one(tile)
            logged = server.requests_since(mark)
            requests[name] = (len(logged) / len(tiles),
                              sum(r[0] in ("PUT", "POST", "DELETE") for r in logged) / len(tiles))
    return pairs, round_ratios, requests


def main():
    src = B.big_source()
    all_tiles = B.tiles_of(src, B.ZOOM)
    tiles = random.Random(11).sample(all_tiles, min(B.TILES_PER_BATCH, len(all_tiles)))
    rows, request_rows = [], []
    for label, scheme, make, count in (
            ("GCS (the tests' store)", "vsigs",
             lambda d: GcsServer(d, buckets=[BUCKET]), True),
            ("Azure (Azurite)", "vsiaz", AzuriteServer, False)):
        server_dir = os.path.join(B.WORK, scheme + "-server")
        shutil.rmtree(server_dir, ignore_errors=True)
        os.makedirs(server_dir)
        server = make(server_dir).start()
        try:
            if scheme == "vsiaz":
                from osgeo import gdal
                for key, value in server.config().items():
                    gdal.SetConfigOption(key, value)
                gdal.Mkdir(f"/vsiaz/{BUCKET}", 0o755)
            pairs, round_ratios, requests = run_store(label, scheme, server, src, tiles, count)
        finally:
            server.stop()
        idem_ms = [1000 * i for i, _ in pairs]
        plain_ms = [1000 * p for _, p in pairs]
        overhead = [i - p for i, p in zip(idem_ms, plain_ms)]
        ratios = [i / p for i, p in pairs]
        rows.append(f"| {label} | {B.med(plain_ms):.0f} | {B.med(idem_ms):.0f} | "
                    f"{B.spread(overhead, '{:.1f}')} | {B.med(ratios):.3f} "
                    f"({min(round_ratios):.3f}–{max(round_ratios):.3f}) |")
        for name, (per_tile, writes) in requests.items():
            request_rows.append(f"| {label} | {name} | {per_tile:.1f} | {writes:.1f} |")
    n = len(tiles)
    lines = [
        "### 6c. Object storage: tiles to /vsigs/ and /vsiaz/, fenced (issue 45)",
        "",
        f"{n} random zoom-{B.ZOOM} tiles (256x256, EPSG:3857, bilinear) cut from the "
        f"{B.SIZE}x{B.SIZE} UTM source, one `gdalwarp` process each, {B.TILE_ROUNDS} rounds of "
        "pairs (plain and IDEM one right after the other, which first drawn per pair), SQLite "
        "ledger. Plain: `gdalwarp -of GTiff --config CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE YES "
        "... /vsigs/...` (or `/vsiaz/`); IDEM: `gdalwarp -of IDEM -co FORMAT=GTiff ... "
        "/vsiidem//vsigs/...`, each upload conditional (GCS: `x-goog-if-generation-match`, one "
        "look at the object first; Azure: IDEM's own Put Blob with `If-None-Match`/`If-Match`, "
        "one look first and one for the ETag after). The stores are emulators on loopback (a "
        "Python server for GCS, Azurite on Node.js for Azure): their own time per request is "
        "part of every figure, so these say what IDEM adds on the wire, not what a real store "
        "costs.",
        "",
        "| store | plain, ms per tile | IDEM, ms per tile | overhead per tile (ms, paired) | "
        "IDEM / plain, median of the pairs (the rounds' medians) |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        "Requests per tile (the GCS store's log), a first run of new tiles and IDEM's rerun of "
        "them:",
        "",
        "| store | run | requests per tile | of which PUT/POST/DELETE |",
        "|---|---|---:|---:|",
        *request_rows,
    ]
    B.write_section("e2e-stores", lines)


if __name__ == "__main__":
    main()
