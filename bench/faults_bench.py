# SPDX-License-Identifier: MIT
"""Faults survived: the many-hosts tests (autotest/test_many_hosts.py: three worker hosts, a
database host with PostgreSQL and PgBouncer, a storage host, as network namespaces) run once with
IDEM_HOSTS_REPORT, and what each fault left is tabulated: tiles, tiles completed twice, tiles
retried (a claim taken over or released and claimed again), tiles uploaded twice, missing or
wrong outputs, objects without a completed row, and the time from the fault until every batch
had ended with every tile completed. Needs root (network namespaces).

    faults_bench.py     (bench/run's step "faults"; IDEM_BENCH_BUILD as idem_bench.py)

Writes the section "faults-survived" of bench/RESULTS.md."""

import json
import os
import subprocess
import sys
import tempfile
import time

import idem_bench as ib


def main():
    report = os.path.join(tempfile.mkdtemp(prefix="idem-faults-"), "faults.jsonl")
    env = dict(os.environ, IDEM_HOSTS_REPORT=report, IDEM_BUILD_DIR=ib.BUILD,
               GDAL_DRIVER_PATH=ib.PLUGIN_DIR)
    env.pop("IDEM_TEST_SHARE", None)  # every many-hosts test, not the matrix share
    started = time.perf_counter()
    proc = subprocess.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(ib.ROOT, "autotest", "test_many_hosts.py")],
                          env=env, cwd=ib.ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    rows = []
    if os.path.exists(report):
        with open(report, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    lines = [
        "### 8. Faults survived: workers on three hosts (issue 32)",
        "",
        f"`bench/faults_bench.py`, {time.strftime('%Y-%m-%d')}: `autotest/test_many_hosts.py` "
        f"({seconds:.0f} s, exit {proc.returncode}). Three worker hosts run the same batch of "
        "12 tiles to `/vsis3/` (a `gdalwarp -of IDEM` per tile, retried after a failure, 1 s "
        "apart), against one PostgreSQL ledger; the lease is 5 s. Each fault strikes once "
        "(docs/operations.md, \"Workers on many hosts\"). *Retried*: tiles whose completed "
        "attempt is not their first. *Uploaded twice*: keys with two versions in the "
        "(versioned) bucket (n/a on Azurite, which keeps no versions: there the test checks that "
        "no blob's ETag changed once the cut worker went on). *Converged in*: from the fault until every batch had ended with "
        "every tile completed (the cut includes the 5 s lease; the lossy link, its 30 s).",
        "",
        "| fault | tiles | completed twice | retried | uploaded twice | missing | wrong | "
        "objects without a row | converged in | rerun changes nothing |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['fault']} | {row.get('tiles', '?')} | {row.get('completed_twice', '?')} | "
            f"{row.get('retried', '?')} | {row.get('uploaded_twice', '?')} | "
            f"{row.get('missing', '?')} | {row.get('wrong', '?')} | {row.get('orphans', '?')} | "
            + (f"{row['seconds_to_converge']:.1f} s" if "seconds_to_converge" in row else "?")
            + f" | {'yes' if row.get('converged') else '**no**'} |")
    if proc.returncode != 0:
        lines += ["", "**The tests failed:**", "", "```", proc.stdout[-3000:], "```"]
    ib.write_section("faults-survived", lines)
    if not rows:
        sys.exit("faults_bench: no fault was reported: " + proc.stdout[-2000:] + proc.stderr)


if __name__ == "__main__":
    main()
