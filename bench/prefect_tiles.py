# SPDX-License-Identifier: MIT
"""The resume benchmark's tile batch as a Prefect 3 flow (bench/orchestrator_bench.py): one task
per tile, two at a time (Prefect's thread pool), each calling gdal.Warp through IDEM in the flow's
process. Run by the tests' venv (tools/pyenv/venv), which sees Debian's osgeo.gdal.

    prefect_tiles.py ARGS     ARGS: one tile a line, "SOURCE XMIN YMIN XMAX YMAX OUTPUT"

IDEM_LEDGER and IDEM_STALE_SECONDS come from the environment."""

import sys

from osgeo import gdal
from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

gdal.UseExceptions()


@task(retries=2, retry_delay_seconds=10)
def warp_tile(source: str, bounds: list[float], output: str) -> str:
    ds = gdal.Warp("/vsiidem/" + output, source, format="IDEM", dstSRS="EPSG:3857",
                   resampleAlg="bilinear", outputBounds=bounds, width=256, height=256,
                   creationOptions=["FORMAT=GTiff"])
    ds = None
    return output


@flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
def tiles(lines: list[str]) -> int:
    futures = []
    for line in lines:
        source, xmin, ymin, xmax, ymax, output = line.split()
        futures.append(warp_tile.submit(source, [float(xmin), float(ymin), float(xmax),
                                                 float(ymax)], output))
    return len([f.result() for f in futures])


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(tiles([line for line in f if line.strip()]))
