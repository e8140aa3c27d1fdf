#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A skip's cost against the number of descriptors the process holds open (issue: the key covers
what the work reads; goal: a skip with 2,000 open descriptors within 0.1 ms of one with 10).

One Python process with the built plugin: a 64x64 GeoTIFF translated once through /vsiidem/ into
a SQLite ledger, then skipped ROUNDS times with 10 and with 2,000 descriptors open (alternating
blocks, so that both counts see the same machine), each call timed alone.

    GDAL_DRIVER_PATH=BUILD/gdalplugins /usr/bin/python3 bench/descriptor_skip_bench.py [ROUNDS]

Prints one JSON line: the median and quartiles of a skip per descriptor count, in ms."""

import json
import os
import statistics
import sys
import tempfile
import time

from osgeo import gdal, osr

gdal.UseExceptions()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    work = tempfile.mkdtemp(prefix="idem-fd-bench-")
    gdal.SetConfigOption("IDEM_LEDGER", "sqlite:" + os.path.join(work, "ledger.sqlite"))
    src = os.path.join(work, "scene.tif")
    ds = gdal.GetDriverByName("GTiff").Create(src, 64, 64, 1)
    ds.SetGeoTransform([500000, 10, 0, 4650000, 0, -10])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    ds.GetRasterBand(1).Fill(7)
    ds = None
    out = "/vsiidem/" + os.path.join(work, "out.tif")
    gdal.Translate(out, src, format="IDEM")
    base = len(os.listdir("/proc/self/fd"))
    extra = []
    times = {10: [], 2000: []}
    for block in range(rounds // 20):
        for count in (10, 2000):
            while base + len(extra) < count:
                extra.append(os.open("/dev/null", os.O_RDONLY))
            while extra and base + len(extra) > count:
                os.close(extra.pop())
            for _ in range(10):
                start = time.perf_counter()
                gdal.Translate(out, src, format="IDEM")
                times[count].append((time.perf_counter() - start) * 1000.0)
    result = {}
    for count, values in times.items():
        q = statistics.quantiles(values, n=4)
        result[f"fds_{count}"] = {"median_ms": round(statistics.median(values), 3),
                                  "q1_ms": round(q[0], 3), "q3_ms": round(q[2], 3),
                                  "n": len(values)}
    result["difference_ms"] = round(result["fds_2000"]["median_ms"] -
                                    result["fds_10"]["median_ms"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
