# SPDX-License-Identifier: MIT
"""Dagster helpers: assets whose data version is IDEM's work key, and whose reruns that skip
are observations, not new materialisations.

    from dagster import asset
    import gdal_idem, gdal_idem.dagster as idem_dagster

    @asset(output_required=False)
    def ortho_z12(context):
        results = [gdal_idem.warp(dst, "scene.tif", dstSRS="EPSG:3857", outputBounds=b)
                   for dst, b in tiles]
        yield from idem_dagster.asset_events(context, results)

When any output was built or rebuilt, asset_events() yields a MaterializeResult with
data_version = the key of the asset's one output, or a digest of the keys of its outputs (a
partition's tiles), and metadata: counts built/rebuilt/skipped, outputs, bytes. When every output
was skipped, it logs an AssetObservation with that data version and the same metadata, and
yields nothing: Dagster records no new materialisation, and its staleness view follows the work
keys. The asset must be declared with output_required=False (no output when nothing changed).
"""

import hashlib

from dagster import AssetObservation, DataVersion, MaterializeResult
from osgeo import gdal

_DATA_VERSION_TAG = "dagster/data_version"


def _as_dict(result):
    return result if isinstance(result, dict) else result.as_dict()


def data_version(results):
    """The data version of an asset made of `results` (gdal_idem Results or their dicts): the
    work key of its one output, or the SHA-256 of its outputs' sorted "output key" lines."""
    results = [_as_dict(r) for r in results]
    if len(results) == 1:
        return DataVersion(results[0]["key"])
    lines = sorted(f"{r['output']} {r['key']}\n" for r in results)
    return DataVersion(hashlib.sha256("".join(lines).encode()).hexdigest())


def _size(path):
    info = gdal.VSIStatL(path)
    return info.size if info is not None else 0


def metadata(results):
    """Counts built/rebuilt/skipped, outputs, and bytes of the outputs' files."""
    results = [_as_dict(r) for r in results]
    counts = {name: sum(r["outcome"] == name for r in results)
              for name in ("built", "rebuilt", "skipped")}
    return {**counts, "outputs": len(results),
            "bytes": sum(_size(path) for r in results for path in r["files"])}


def asset_events(context, results):
    """For a generator asset with output_required=False: a MaterializeResult when something was
    built or rebuilt, else an AssetObservation logged and nothing yielded."""
    version = data_version(results)
    facts = metadata(results)
    if facts["built"] or facts["rebuilt"]:
        yield MaterializeResult(data_version=version, metadata=facts)
        return
    context.log_event(AssetObservation(asset_key=context.asset_key, metadata=facts,
                                       tags={_DATA_VERSION_TAG: version.value}))
