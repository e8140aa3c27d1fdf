# SPDX-License-Identifier: MIT
"""Prefect 3 helpers: task runs that say whether IDEM built, rebuilt or skipped their output.

    from prefect import flow, task
    import gdal_idem.prefect as idem_prefect

    @task(retries=3)
    def warp_tile(dst, bounds):
        return idem_prefect.warp(dst, "scene.tif", dstSRS="EPSG:3857", outputBounds=bounds)

    @flow
    def tiles(jobs):
        results = [f.result() for f in [warp_tile.submit(*job) for job in jobs]]
        idem_prefect.publish_summary(results)

A task that returns what warp() or translate() here return ends in a Completed state named
"Built", "Rebuilt" or "Skipped" (a skip is not a fresh success), whose result is the call's
Result as a dict (key, attempt, output, files, timings). publish_summary() publishes a table
artifact per flow run: counts and the slowest outputs. cache_key() gives Prefect's cache the
IDEM key, so both agree on what is the same work; IDEM's claim, not Prefect's cache, is what
keeps racing runs from doing it twice (docs/python.md).
"""

from prefect.artifacts import create_table_artifact
from prefect.states import Completed

from . import _calls

_STATE_NAMES = {"built": "Built", "rebuilt": "Rebuilt", "skipped": "Skipped"}


def state_of(result):
    """The Completed state a task returns for `result` (a gdal_idem Result)."""
    return Completed(name=_STATE_NAMES[result.outcome],
                     message=f"{result.outcome} {result.output} (key {result.key[:12]}, "
                             f"attempt {result.attempt})",
                     data=result.as_dict())


def warp(dst, src, **kwargs):
    """gdal_idem.warp(), as a task's return value: a Completed state named after the outcome."""
    return state_of(_calls.warp(dst, src, **kwargs))


def translate(dst, src, **kwargs):
    """gdal_idem.translate(), as a task's return value."""
    return state_of(_calls.translate(dst, src, **kwargs))


def summary(results):
    """Counts of `results` (the dicts the tasks returned): {"built", "rebuilt", "skipped",
    "slowest": [(elapsed ms, output)...] of the five slowest outputs built or rebuilt}."""
    counts = {"built": 0, "rebuilt": 0, "skipped": 0}
    done = []
    for result in results:
        counts[result["outcome"]] += 1
        if result["outcome"] != "skipped":
            done.append((result["timings"].get("elapsed", 0.0), result["output"]))
    counts["slowest"] = sorted(done, reverse=True)[:5]
    return counts


def publish_summary(results, key="gdal-idem-summary"):
    """Publishes summary(results) as a table artifact of the current flow run (`key`: the
    artifact's key, lowercase letters, digits and dashes); returns the summary."""
    counts = summary(results)
    table = [{"outcome": name, "outputs": counts[name], "output": "", "elapsed ms": ""}
             for name in ("built", "rebuilt", "skipped")]
    table += [{"outcome": "slowest", "outputs": "", "output": output,
               "elapsed ms": round(elapsed, 1)} for elapsed, output in counts["slowest"]]
    create_table_artifact(table, key=key,
                          description=f"gdal-idem: {counts['built']} built, {counts['rebuilt']} "
                                      f"rebuilt, {counts['skipped']} skipped")
    return counts


def cache_key(call):
    """A Prefect cache_key_fn giving the IDEM key of the task's work: `call(parameters)` returns
    ("warp" or "translate", dst, src, kwargs) for the task's parameters; the key is computed by a
    dry run (nothing written, no ledger touched)."""

    def key_fn(_context, parameters):
        kind, dst, src, kwargs = call(parameters)
        return _calls.work_key(kind, dst, src, **kwargs)

    return key_fn
