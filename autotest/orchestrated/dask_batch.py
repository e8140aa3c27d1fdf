# SPDX-License-Identifier: MIT
"""The batch in BATCH_DIR (tiles.py) on a Dask distributed LocalCluster of 3 worker processes
(one thread each), each task calling gdal.Warp in its worker's process. A task whose tile is to
be killed kills its own worker (SIGKILL) at the pause point; Dask's nanny restarts the worker and
the scheduler runs the task again elsewhere.

    dask_batch.py      prints one JSON line: the outputs"""

import json

from distributed import Client, LocalCluster

from tiles import Batch


def warp_tile(name):
    return Batch().warp_in_process(name)


def main():
    names = sorted(Batch().tiles)
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        futures = client.map(warp_tile, names, pure=False)
        print(json.dumps(client.gather(futures)))


if __name__ == "__main__":
    main()
