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
partition's tiles), and metadata: counts built/rebuilt/skipped, outputs, bytes, and the footprint
(the outputs' extent in longitude/latitude, GeoJSON). When every output
was skipped, it logs an AssetObservation with that data version and the same metadata, and
yields nothing: Dagster records no new materialisation, and its staleness view follows the work
keys. The asset must be declared with output_required=False (no output when nothing changed).
"""

import hashlib

from dagster import AssetObservation, DataVersion, MaterializeResult, MetadataValue
from osgeo import gdal, osr

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


def _lonlat_bounds(path):
    """(west, south, east, north) of a raster in EPSG:4326, west > east when it crosses the
    antimeridian; None when it has no geotransform or CRS."""
    dataset = gdal.OpenEx(path, gdal.OF_RASTER)
    if dataset is None:
        return None
    transform, srs = dataset.GetGeoTransform(can_return_null=True), dataset.GetSpatialRef()
    if transform is None or srs is None:
        return None
    xs = [transform[0] + transform[1] * px + transform[2] * py
          for px in (0, dataset.RasterXSize) for py in (0, dataset.RasterYSize)]
    ys = [transform[3] + transform[4] * px + transform[5] * py
          for px in (0, dataset.RasterXSize) for py in (0, dataset.RasterYSize)]
    lonlat = osr.SpatialReference()
    lonlat.ImportFromEPSG(4326)
    lonlat.SetAxisMappingStrategy(osr.OAMS_TRADITIONAL_GIS_ORDER)
    to_lonlat = osr.CoordinateTransformation(srs, lonlat)
    west, south, east, north = to_lonlat.TransformBounds(min(xs), min(ys), max(xs), max(ys), 21)
    if west <= east and (west < -180 or east > 180):  # longitudes past +-180 (a 0..360 grid)
        width = east - west
        if width >= 360:
            return -180.0, south, 180.0, north
        west = (west + 180) % 360 - 180
        east = west + width if west + width <= 180 else west + width - 360
    return west, south, east, north


def _ring(west, south, east, north):
    return [[[west, south], [east, south], [east, north], [west, north], [west, south]]]


def footprint(results):
    """The extent of the outputs in longitude/latitude as GeoJSON: a Polygon, or a MultiPolygon
    of the two sides when the extent crosses the antimeridian (as IDEM's footprints are split);
    None when no output is georeferenced. The extent of the outputs' bounding boxes, not of
    their valid pixels."""
    boxes = [box for r in (_as_dict(r) for r in results)
             for box in [_lonlat_bounds(r["output"])] if box is not None]
    if not boxes:
        return None
    south, north = min(b[1] for b in boxes), max(b[3] for b in boxes)
    if all(b[0] <= b[2] for b in boxes):
        west, east = min(b[0] for b in boxes), max(b[2] for b in boxes)
        return {"type": "Polygon", "coordinates": _ring(west, south, east, north)}
    # Some box crosses the antimeridian: join them on longitudes 0..360, then split at 180 (the
    # STAC export joins a collection's extent the same way: src/cli/stac_export.cpp,
    # joined_extent).
    shifted = [(w % 360, (e % 360) + (360 if e % 360 < w % 360 else 0)) for w, _, e, _ in boxes]
    west, east = min(w for w, _ in shifted), max(e for _, e in shifted)
    if east - west >= 360:
        return {"type": "Polygon", "coordinates": _ring(-180, south, 180, north)}
    if west >= 180:  # all of it west of the antimeridian, in -180..180 terms
        west, east = west - 360, east - 360
    if east <= 180:
        return {"type": "Polygon", "coordinates": _ring(west, south, east, north)}
    return {"type": "MultiPolygon",
            "coordinates": [_ring(west, south, 180, north), _ring(-180, south, east - 360, north)]}


def metadata(results):
    """Counts built/rebuilt/skipped, outputs, bytes of the outputs' files, and their footprint
    (footprint(), when any output is georeferenced)."""
    results = [_as_dict(r) for r in results]
    counts = {name: sum(r["outcome"] == name for r in results)
              for name in ("built", "rebuilt", "skipped")}
    facts = {**counts, "outputs": len(results),
             "bytes": sum(_size(path) for r in results for path in r["files"])}
    where = footprint(results)
    if where is not None:
        facts["footprint"] = MetadataValue.json(where)
    return facts


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
