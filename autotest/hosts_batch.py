# SPDX-License-Identifier: MIT
"""The tile batch a worker host runs in the many-hosts tests (autotest/test_many_hosts.py), as an
orchestrator's worker would: each tile is a `gdalwarp -of IDEM` to /vsiidem//vsis3/..., retried
after a failure (up to --tries times, --retry-delay seconds apart), the tiles taken in the order
of the batch file rotated by --start, --lanes tiles at a time.

    hosts_batch.py BATCH_JSON RESULTS_JSONL [--start N] [--lanes N] [--tries N]
                   [--retry-delay S] [--pause TILE,TILE --pause-at POINT --pause-dir DIR]
                   [--repeat-for S]

The first attempt of each --pause tile stops at the pause point --pause-at until DIR/resume
exists, and says so by creating DIR/reached-TILE. With --repeat-for, the batch is run again
until that many seconds have passed since it began (each run after the first is a rerun, and
starts no tile after that time).
Each attempt is a line of RESULTS_JSONL: {"tile", "attempt", "exit", "stderr"}. Exits 1 if a
tile never succeeded."""

import argparse
import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

WARP = ["-t_srs", "EPSG:3857", "-ts", "64", "64", "-r", "bilinear"]


def warp_command(spec, name):
    xmin, ymin, xmax, ymax = spec["tiles"][name]
    return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=GTiff",
            "-co", "NAMESPACE=hosts", "-co", "LAYER=tiles", *WARP,
            "-te", repr(xmin), repr(ymin), repr(xmax), repr(ymax), spec["source"],
            f"/vsiidem/{spec['prefix']}/{name}.tif"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("batch")
    parser.add_argument("results")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--lanes", type=int, default=1)
    parser.add_argument("--tries", type=int, default=8)
    parser.add_argument("--retry-delay", type=float, default=1.0)
    parser.add_argument("--pause", default="")
    parser.add_argument("--pause-at", default="before_commit")
    parser.add_argument("--pause-dir")
    parser.add_argument("--repeat-for", type=float, default=0)
    args = parser.parse_args()
    with open(args.batch, encoding="utf-8") as f:
        spec = json.load(f)
    names = sorted(spec["tiles"])
    names = names[args.start % len(names):] + names[:args.start % len(names)]
    to_pause = set(filter(None, args.pause.split(",")))
    lock = threading.Lock()
    results = open(args.results, "a", encoding="utf-8")  # noqa: SIM115 (closed at exit)

    began = time.monotonic()
    passes = [0]

    def one(name):
        if passes[0] > 0 and time.monotonic() - began >= args.repeat_for:
            return True  # a rerun's tile after --repeat-for: not started
        for attempt in range(1, args.tries + 1):
            env = dict(os.environ)
            if name in to_pause and attempt == 1:
                env.update(IDEM_TEST_PAUSE_AT=args.pause_at, IDEM_TEST_PAUSE_SECONDS="600",
                           IDEM_TEST_RESUME_FILE=os.path.join(args.pause_dir, "resume"),
                           IDEM_TEST_REACHED_FILE=os.path.join(args.pause_dir, f"reached-{name}"))
            proc = subprocess.run(warp_command(spec, name), env=env, capture_output=True,
                                  text=True)
            with lock:
                results.write(json.dumps({"tile": name, "attempt": attempt,
                                          "exit": proc.returncode,
                                          "stderr": proc.stderr[-4000:]}) + "\n")
                results.flush()
            if proc.returncode == 0:
                return True
            time.sleep(args.retry_delay)  # the orchestrator's retry delay
        return False

    while True:
        with ThreadPoolExecutor(max_workers=args.lanes) as pool:
            done = list(pool.map(one, names))
        if not all(done) or time.monotonic() - began >= args.repeat_for:
            break
        to_pause = set()
        passes[0] += 1
    results.close()
    raise SystemExit(0 if all(done) else 1)


if __name__ == "__main__":
    main()
