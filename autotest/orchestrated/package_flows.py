# SPDX-License-Identifier: MIT
"""Prefect 3 and Dagster over tiles written through the gdal_idem package (run by the tests'
venv; autotest/test_package_orchestrators.py). BATCH_DIR holds src/N.tif, one small source per
tile (TILES of them); outputs go to BATCH_DIR/<mode>/N.tif.

    package_flows.py prefect   one task run per tile (gdal_idem.prefect.translate) and the flow
                               run's summary artifact; prints what Prefect's client reports: the
                               task runs' state names, their results, and the artifact
    package_flows.py dagster   TILES / 8 assets of 8 tiles each (gdal_idem.dagster.asset_events),
                               materialised in the instance of DAGSTER_HOME; prints, per asset,
                               what this run's event log holds: a materialisation or an
                               observation, and its data version

One JSON line on stdout."""

import json
import os
import sys

import gdal_idem

BATCH = os.environ["BATCH_DIR"]
TILES = int(os.environ.get("TILES", "32"))


def source(n):
    return os.path.join(BATCH, "src", f"{n}.tif")


def output(mode, n):
    return os.path.join(BATCH, mode, f"{n}.tif")


def final_task_runs(client, flow_run_filter):
    """The flow run's task runs once the server holds a final state for each of them: Prefect 3
    records a task run's states from the events its client sends, which may reach the server
    after the flow has returned (a task run then still reads RUNNING). Polled until then; after
    a generous bound, what is there is returned and the test's assertions say what is missing."""
    import time
    give_up = time.monotonic() + 120
    while True:
        runs = client.read_task_runs(flow_run_filter=flow_run_filter)
        if (len(runs) >= TILES and all(run.state is not None and run.state.is_final()
                                       for run in runs)) or time.monotonic() > give_up:
            return runs
        time.sleep(0.05)


def run_prefect():
    from prefect import flow, runtime, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                FlowRunFilter, FlowRunFilterId)
    from prefect.task_runners import ThreadPoolTaskRunner

    import gdal_idem.prefect as idem_prefect

    # persist_result: the task runs' results (the calls' results) readable through the API
    @task(retries=1, retry_delay_seconds=1, persist_result=True)
    def tile(n: int):
        return idem_prefect.translate(output("prefect", n), source(n), layer="prefect")

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=4))
    def tiles():
        results = [f.result() for f in tile.map(range(TILES))]
        idem_prefect.publish_summary(results)
        return str(runtime.flow_run.id)

    flow_run_id = tiles()
    with get_client(sync_client=True) as client:
        runs = final_task_runs(client, FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
        reported = [{"state": run.state.name, "type": run.state.type.value,
                     "result": run.state.result()} for run in runs]
    print(json.dumps({"task_runs": reported,
                      "artifacts": [{"key": a.key, "type": a.type, "data": a.data,
                                     "description": a.description} for a in artifacts]}))


def run_dagster():
    from dagster import DagsterEventType, DagsterInstance, asset, materialize

    import gdal_idem.dagster as idem_dagster

    def row_asset(row):
        @asset(name=f"row_{row}", output_required=False)
        def tiles_of_row(context):
            results = [gdal_idem.translate(output("dagster", n), source(n), layer="dagster")
                       for n in range(row * 8, row * 8 + 8)]
            yield from idem_dagster.asset_events(context, results)

        return tiles_of_row

    assets = [row_asset(row) for row in range(TILES // 8)]
    with DagsterInstance.get() as instance:
        result = materialize(assets, instance=instance)
        events = {}
        for event in instance.all_logs(result.run_id):
            dagster_event = event.dagster_event
            if dagster_event is None:
                continue
            if dagster_event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
                happened = dagster_event.event_specific_data.materialization
                kind = "materialization"
            elif dagster_event.event_type == DagsterEventType.ASSET_OBSERVATION:
                happened = dagster_event.event_specific_data.asset_observation
                kind = "observation"
            else:
                continue
            events[happened.asset_key.to_user_string()] = {
                "event": kind, "data_version": happened.tags.get("dagster/data_version"),
                "metadata": {k: v.value for k, v in happened.metadata.items()}}
    print(json.dumps({"success": result.success, "assets": events}))


if __name__ == "__main__":
    {"prefect": run_prefect, "dagster": run_dagster}[sys.argv[1]]()
