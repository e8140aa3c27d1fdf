# SPDX-License-Identifier: MIT
"""A Prefect 3 flow over the batch in BATCH_DIR (tiles.py): one task run per tile, retried by
Prefect, each warping its tile through IDEM.

    prefect_flow.py gdalwarp     tasks run gdalwarp as a subprocess, on Prefect's thread pool
    prefect_flow.py gdal.Warp    tasks call gdal.Warp in the flow's process, on the thread pool
    prefect_flow.py dask         tasks call gdal.Warp in the worker processes of a Dask
                                 LocalCluster (prefect-dask's DaskTaskRunner, 3 workers)

RETRY_DELAY (seconds, default 6) is the tasks' retry delay. With FLOW_BARRIER=N, the flow waits
until N flows (this one included) have reached it before submitting its tasks: flows that race
for real. Prints one JSON line: the outputs."""

import json
import os
import sys
import time
import uuid

from prefect import flow, task
from prefect.task_runners import ThreadPoolTaskRunner

from tiles import Batch

RETRY_DELAY = float(os.environ.get("RETRY_DELAY", "6"))


@task(retries=2, retry_delay_seconds=RETRY_DELAY)
def warp_tile_gdalwarp(name: str) -> str:
    return Batch().warp_subprocess(name)


@task(retries=2, retry_delay_seconds=RETRY_DELAY)
def warp_tile_in_process(name: str) -> str:
    return Batch().warp_in_process(name)


def barrier(parties):
    directory = os.path.join(Batch().dir, "barrier")
    os.makedirs(directory, exist_ok=True)
    open(os.path.join(directory, uuid.uuid4().hex), "w", encoding="utf-8").close()
    while len(os.listdir(directory)) < parties:
        time.sleep(0.01)  # polling for the other flows


def tiles_flow(warp):
    names = sorted(Batch().tiles)
    if os.environ.get("FLOW_BARRIER"):
        barrier(int(os.environ["FLOW_BARRIER"]))
    return warp.map(names).result()


def main(mode):
    if mode == "gdalwarp":
        run = flow(name="tiles-gdalwarp", task_runner=ThreadPoolTaskRunner(max_workers=4))(
            lambda: tiles_flow(warp_tile_gdalwarp))
    elif mode == "gdal.Warp":
        run = flow(name="tiles-gdal-warp", task_runner=ThreadPoolTaskRunner(max_workers=4))(
            lambda: tiles_flow(warp_tile_in_process))
    elif mode == "dask":
        from prefect_dask import DaskTaskRunner
        runner = DaskTaskRunner(cluster_kwargs={"n_workers": 3, "threads_per_worker": 1,
                                                "processes": True, "dashboard_address": None})
        run = flow(name="tiles-dask", task_runner=runner)(
            lambda: tiles_flow(warp_tile_in_process))
    else:
        sys.exit(f"unknown mode {mode!r}: gdalwarp, gdal.Warp or dask")
    print(json.dumps(run()))


if __name__ == "__main__":
    main(sys.argv[1])
