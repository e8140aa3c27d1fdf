# SPDX-License-Identifier: MIT
"""A Dagster job over the batch in BATCH_DIR (tiles.py): one op run per row of tiles (a dynamic
mapping), under a RetryPolicy and the multiprocess executor (each op run in its own process),
each op warping its tiles one after the other with gdalwarp as a subprocess. A retried op warps
the whole row again: the tiles it completed before skip.

    dagster_job.py      runs the job on the instance in DAGSTER_HOME; exits 0 when it succeeded

RETRY_DELAY (seconds, default 6) is the RetryPolicy's delay."""

import os
import re
import sys

from dagster import (DagsterInstance, DynamicOut, DynamicOutput, RetryPolicy, execute_job, job,
                     multiprocess_executor, op, reconstructable)

from tiles import Batch

RETRY_DELAY = float(os.environ.get("RETRY_DELAY", "6"))


@op(out=DynamicOut(list))
def tile_rows():
    rows = {}
    for name in sorted(Batch().tiles):  # names are COLUMN_ROW
        rows.setdefault(name.split("_")[-1], []).append(name)
    for row, names in sorted(rows.items()):
        yield DynamicOutput(names, mapping_key="row_" + re.sub(r"\W", "_", row))


@op(retry_policy=RetryPolicy(max_retries=2, delay=RETRY_DELAY))
def warp_row(names: list) -> list:
    batch = Batch()
    return [batch.warp_subprocess(name) for name in names]


@job(executor_def=multiprocess_executor.configured({"max_concurrent": 2}))
def tiles_job():
    tile_rows().map(warp_row)


def main():
    with DagsterInstance.get() as instance:
        result = execute_job(reconstructable(tiles_job), instance=instance)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
