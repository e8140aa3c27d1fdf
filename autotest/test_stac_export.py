# SPDX-License-Identifier: MIT
"""`gdal-idem export --format stac DIR` (docs/operations.md): the completed outputs as a static
STAC 1.1.0 catalog, read back by pystac (tools/pyenv/venv) and validated against the STAC
schemas pystac ships, its items checked against the ledger and the files; incremental (only
changed items are written, forgotten ones removed) and never following a link it did not make."""

import json
import os

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, ROOT, env_with, gdal_at_least, lonlat_corners,  # noqa: F401
                          make_source, run, sqlite_ledger)

VENV_PYTHON = os.path.join(ROOT, "tools", "pyenv", "venv", "bin", "python")
R = 20037508.342789244

# Reads the catalog with pystac: each object validated against the STAC core schemas pystac
# ships (the extensions' schemas are not reachable offline: their fields are read through
# pystac's extension classes, which check the extension's version is declared).
READ_CATALOG = r"""
import json, sys
import pystac
from pystac.extensions.file import FileExtension
from pystac.extensions.projection import ProjectionExtension
from pystac.validation import validate_dict

def core_valid(obj):
    with open(obj.get_self_href()) as f:
        validate_dict(json.load(f), extensions=[])

catalog = pystac.Catalog.from_file(sys.argv[1])
core_valid(catalog)
found = {"collections": {}, "items": {}}
for collection in catalog.get_children():
    core_valid(collection)
    found["collections"][collection.id] = {
        "bbox": collection.extent.spatial.bboxes[0],
        "items": sorted(i.id for i in collection.get_items())}
    for item in collection.get_items():
        core_valid(item)
        proj = ProjectionExtension.ext(item)
        asset = item.assets["data"]
        found["items"][item.id] = {
            "collection": item.collection_id, "bbox": item.bbox,
            "geometry": item.geometry["type"], "datetime": item.datetime.isoformat(),
            "key": item.properties["idem:key"], "attempt": item.properties["idem:attempt"],
            "code": proj.code, "shape": proj.shape, "transform": proj.transform,
            "href": asset.get_absolute_href(), "size": FileExtension.ext(asset).size,
            "type": asset.media_type, "bands": asset.extra_fields.get("bands")}
print(json.dumps(found))
"""


# stac-validator, run offline: the STAC 1.1.0 core schemas (and GeoJSON's) it would fetch are
# given as the local copies pystac ships, under the addresses the schemas refer to each other by.
# Its --core mode validates one object (no recursion), so every file is validated in turn.
STAC_VALIDATOR = r"""
import json, pathlib, sys
from pystac.validation import local_validator
from stac_validator.validate import StacValidate

root = pathlib.Path(local_validator.__file__).parent / "jsonschemas"
schema_map = {url: str(root / ("geojson" if "geojson.org" in url else "stac-spec/v1.1.0")
                       / url.rsplit("/", 1)[1])
              for url in local_validator.get_local_schema_cache()}
verdicts = {}
for path in sys.argv[1:]:
    validator = StacValidate(path, core=True, schema_map=schema_map)
    validator.run()
    [message] = validator.message
    verdicts[path] = {"valid": message["valid_stac"], "type": message.get("asset_type"),
                      "error": message.get("error_message")}
print(json.dumps(verdicts))
"""


def tile_bounds(z, x, y):
    size = 2 * R / 2 ** z
    return (-R + x * size, R - (y + 1) * size, -R + (x + 1) * size, R - y * size)


def tile(source, out, z, x, y, resampling="bilinear", layer="tiles"):
    return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=PNG", "-co",
            f"TILE={z}/{x}/{y}", "-co", f"LAYER={layer}", "-t_srs", "EPSG:3857", "-r", resampling,
            "-te", *map(repr, tile_bounds(z, x, y)), "-ts", "256", "256", source,
            f"/vsiidem/{out}"]


def export(ledger, directory, *extra):
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "--json", "export", "--format", "stac",
                str(directory), *extra])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def read_catalog(directory):
    if not os.path.exists(VENV_PYTHON):
        pytest.fail("the tests' Python venv is missing: run `make deps`")
    proc = run([VENV_PYTHON, "-c", READ_CATALOG, str(directory / "catalog.json")],
               env=env_with(), check=True)
    return json.loads(proc.stdout)


def stac_validator(paths):
    """stac-validator's verdict on each file: {path: {"valid", "type", "error"}}."""
    proc = run([VENV_PYTHON, "-c", STAC_VALIDATOR, *map(str, paths)], env=env_with(), check=True)
    return json.loads(proc.stdout)


def item_states(directory):
    """{item file: (mtime_ns, bytes)} under the catalog."""
    states = {}
    for folder, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                states[os.path.relpath(path, directory)] = (os.stat(path).st_mtime_ns, f.read())
    return {k: v for k, v in states.items() if "/items/" in k}


@pytest.fixture
def outputs(tmp_path, sqlite_ledger):
    """Three z14 PNG tiles (layer tiles) and one UTM GeoTIFF (layer scenes), built through IDEM."""
    source = make_source(tmp_path / "scene.tif", size=400)
    (tmp_path / "tiles").mkdir()
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    tiles = [(14, 8874, 6081), (14, 8875, 6081), (14, 8874, 6082)]
    for z, x, y in tiles:
        run(tile(source, tmp_path / "tiles" / f"{z}-{x}-{y}.png", z, x, y), env=env, check=True)
    run(["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=GTiff", "-co", "LAYER=scenes",
         source, f"/vsiidem/{tmp_path / 'scene_copy.tif'}"], env=env, check=True)
    return tmp_path, source, env, tiles


def test_the_catalog_is_valid_stac_and_says_what_the_ledger_and_files_say(outputs, sqlite_ledger):
    tmp_path, _, _, _ = outputs
    catalog = tmp_path / "catalog"
    report = export(sqlite_ledger, catalog)
    assert report["items_written"] == 4 and report["collections"] == 2
    found = read_catalog(catalog)
    rows = {r["work_key"]: r for r in sqlite_ledger.completed()}
    assert set(found["items"]) == set(rows)
    assert sorted(found["collections"]) == ["default-scenes", "default-tiles"]
    for key, item in found["items"].items():
        row = rows[key]
        output = row["output_uri"]
        assert item["key"] == key and item["attempt"] == row["attempt"]
        assert item["href"] == output and item["size"] == os.path.getsize(output)
        dataset = gdal.Open(output)
        gt = dataset.GetGeoTransform()
        assert item["shape"] == [dataset.RasterYSize, dataset.RasterXSize]
        assert item["transform"] == pytest.approx([gt[1], gt[2], gt[0], gt[4], gt[5], gt[3]])
        west, south, east, north = item["bbox"]
        for lon, lat in lonlat_corners(output):
            assert west - 1e-9 <= lon <= east + 1e-9 and south - 1e-9 <= lat <= north + 1e-9
        assert item["geometry"] == "Polygon"
        collection = found["collections"][item["collection"]]
        assert key in collection["items"]
        cw, cs, ce, cn = collection["bbox"]
        assert cw <= west and cs <= south and ce >= east and cn >= north
    tiles = [i for i in found["items"].values() if i["collection"] == "default-tiles"]
    assert len(tiles) == 3 and {i["code"] for i in tiles} == {"EPSG:3857"}
    assert {i["type"] for i in tiles} == {"image/png"}
    [scene] = [i for i in found["items"].values() if i["collection"] == "default-scenes"]
    assert scene["code"] == "EPSG:32633"


def test_a_rerun_writes_only_what_changed(outputs, sqlite_ledger):
    """A second export writes nothing; after one tile is rebuilt with other work, only its item
    changes (the old key's item removed, the new one written); after a forget, its item goes."""
    tmp_path, source, env, tiles = outputs
    catalog = tmp_path / "catalog"
    export(sqlite_ledger, catalog)
    before = item_states(catalog)
    again = export(sqlite_ledger, catalog)
    assert (again["items_written"], again["items_unchanged"], again["items_removed"]) == (0, 4, 0)
    assert item_states(catalog) == before
    z, x, y = tiles[0]
    run(tile(source, tmp_path / "tiles" / f"{z}-{x}-{y}.png", z, x, y, resampling="near"),
        env=env, check=True)
    rebuilt = export(sqlite_ledger, catalog)
    assert (rebuilt["items_written"], rebuilt["items_removed"]) == (1, 1)
    after = item_states(catalog)
    assert len(set(before) - set(after)) == 1 and len(set(after) - set(before)) == 1
    assert all(after[name] == state for name, state in before.items() if name in after)
    [forgotten] = [name for name in after if name.startswith("default-scenes/")]
    key = os.path.basename(forgotten)[:-len(".json")]
    run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "-q", "forget", key], check=True)
    gone = export(sqlite_ledger, catalog)
    assert gone["items_removed"] == 1 and gone["collections"] == 1
    assert not (catalog / "default-scenes").exists()
    assert sorted(read_catalog(catalog)["collections"]) == ["default-tiles"]


def test_the_export_never_follows_or_deletes_what_it_did_not_write(outputs, sqlite_ledger):
    """Files in the catalog that are not items of this export stay: another file in an items
    directory, a link named like an item (its target untouched), and a linked directory holding
    what looks like a stale collection."""
    tmp_path, _, _, _ = outputs
    catalog = tmp_path / "catalog"
    export(sqlite_ledger, catalog)
    items = catalog / "default-tiles" / "items"
    (items / "notes.json").write_text("{}")
    # The temporary files of items an interrupted export left (this release's naming, and an
    # earlier one's) are removed; nothing else is.
    left = items / (sorted(os.listdir(items))[0] + ".idem-tmp-a1B2c3")
    left.write_text("half")
    left_now = items / (".idem-tmp-0123456789ab." + sorted(os.listdir(items))[0])
    left_now.write_text("half")
    victim = tmp_path / "victim.json"
    victim.write_text("keep me")
    os.symlink(victim, items / ("f" * 64 + ".json"))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "items").mkdir(parents=True)
    (elsewhere / "collection.json").write_text('{"idem:namespace": "x"}')
    (elsewhere / "items" / ("e" * 64 + ".json")).write_text("keep me too")
    os.symlink(elsewhere, catalog / "linked")
    export(sqlite_ledger, catalog)
    assert (items / "notes.json").read_text() == "{}"
    assert not left.exists() and not left_now.exists()
    assert os.path.islink(items / ("f" * 64 + ".json")) and victim.read_text() == "keep me"
    assert (elsewhere / "items" / ("e" * 64 + ".json")).read_text() == "keep me too"
    assert (elsewhere / "collection.json").exists()
    # An item path that is a link is not written through either: the export fails, naming it.
    row = sqlite_ledger.completed()[0]
    collection = "default-" + row["layer"]
    target = catalog / collection / "items" / (row["work_key"] + ".json")
    target.unlink()
    os.symlink(victim, target)
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "export", "--format", "stac",
                catalog])
    assert proc.returncode != 0 and str(target) in proc.stderr
    assert victim.read_text() == "keep me"


def test_a_catalog_on_a_virtual_filesystem_is_refused(sqlite_ledger, tmp_path):
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "export", "--format", "stac",
                "/vsimem/catalog"])
    assert proc.returncode == 2 and "local directory" in proc.stderr


@pytest.mark.parametrize("value", ["gpkg", "geojson", "csv"])
def test_another_format_than_stac_is_refused_not_ignored(sqlite_ledger, tmp_path, value):
    """--format names the STAC export only: a vector export's format comes from OUT's extension,
    so `--format gpkg out.geojson` is refused rather than writing GeoJSON."""
    out = tmp_path / "out.geojson"
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "export", "--format", value, out])
    assert proc.returncode == 2 and "from OUT's extension" in proc.stderr
    assert not out.exists()


def test_stac_validator_finds_every_object_valid(outputs, sqlite_ledger):
    """stac-validator (tools/pyenv) validates the catalog, each collection and each item against
    the STAC 1.1.0 core schemas; an item broken on purpose is found invalid, so the validator
    really ran on what it was given."""
    tmp_path, _, _, _ = outputs
    catalog = tmp_path / "catalog"
    export(sqlite_ledger, catalog)
    files = sorted(catalog.rglob("*.json"))
    verdicts = stac_validator(files)
    assert len(verdicts) == 1 + 2 + 4
    assert all(v["valid"] for v in verdicts.values()), verdicts
    assert sorted(v["type"] for v in verdicts.values()) == \
        ["CATALOG", "COLLECTION", "COLLECTION", "ITEM", "ITEM", "ITEM", "ITEM"]
    item = next(p for p in files if p.parent.name == "items")
    broken = json.loads(item.read_text())
    broken["bbox"] = "everywhere"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    [verdict] = stac_validator([tmp_path / "broken.json"]).values()
    assert not verdict["valid"] and "bbox" in verdict["error"]


STAC_DATA_TYPES = {gdal.GDT_Byte: "uint8", gdal.GDT_UInt16: "uint16", gdal.GDT_Int16: "int16",
                   gdal.GDT_UInt32: "uint32", gdal.GDT_Int32: "int32",
                   gdal.GDT_Float32: "float32", gdal.GDT_Float64: "float64"}


def stac_nodata(value):
    if value is None:
        return None
    return "nan" if value != value else value


def test_an_assets_bands_are_what_its_file_holds(outputs, sqlite_ledger):
    """Each asset's bands (STAC 1.1's common `bands`: data type and nodata) match what GDAL reads
    from the output; an output whose format could not hold the work's data type (PNG asked for
    Float32, which GDAL writes as Byte) gets no bands rather than wrong ones."""
    tmp_path, source, env, _ = outputs
    float_source = make_source(tmp_path / "float.tif", size=64, bands=1, dtype=gdal.GDT_Float32,
                               nodata=float("nan"))
    run(["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=GTiff", "-co", "LAYER=scenes",
         float_source, f"/vsiidem/{tmp_path / 'float_copy.tif'}"], env=env, check=True)
    run(["gdalwarp", "-q", "-of", "IDEM", "-co", "FORMAT=GTiff", "-co", "LAYER=scenes",
         "-t_srs", "EPSG:4326", "-ot", "UInt16", "-dstnodata", "7", source,
         f"/vsiidem/{tmp_path / 'uint16.tif'}"], env=env, check=True)
    run(["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=PNG", "-co", "LAYER=scenes",
         "-ot", "Float32", source, f"/vsiidem/{tmp_path / 'converted.png'}"], env=env,
        check=True)
    catalog = tmp_path / "catalog"
    export(sqlite_ledger, catalog)
    found = read_catalog(catalog)["items"]
    by_output = {item["href"]: item for item in found.values()}
    assert len(by_output) == 7
    assert by_output[str(tmp_path / "converted.png")]["bands"] is None
    assert gdal.Open(str(tmp_path / "converted.png")).GetRasterBand(1).DataType == gdal.GDT_Byte
    described = {}
    for output, item in by_output.items():
        if output.endswith("converted.png"):
            continue
        dataset = gdal.Open(output)
        held = [{"data_type": STAC_DATA_TYPES[band.DataType],
                 "nodata": stac_nodata(band.GetNoDataValue())}
                for band in (dataset.GetRasterBand(i + 1) for i in range(dataset.RasterCount))]
        assert item["bands"] is not None, output
        assert [{"data_type": b["data_type"], "nodata": b.get("nodata")} for b in item["bands"]] \
            == held, output
        described[os.path.basename(output)] = held[0]
    assert described["float_copy.tif"] == {"data_type": "float32", "nodata": "nan"}
    assert described["uint16.tif"] == {"data_type": "uint16", "nodata": 7}
    assert described["scene_copy.tif"] == {"data_type": "uint8", "nodata": None}


@pytest.mark.skipif(not gdal_at_least("3.10"),
                    reason="GDAL 3.6's STACIT reads projection v1's proj:epsg; the catalog "
                           "writes STAC 1.1's proj:code, which GDAL 3.10 and later read")
def test_gdal_stacit_mosaics_a_collections_items(outputs, sqlite_ledger):
    """GDAL's STACIT driver opens the items of a collection gathered into an ItemCollection (as a
    STAC API search returns them): its mosaic has the tiles' pixels, each at its place."""
    tmp_path, _, _, tiles = outputs
    catalog = tmp_path / "catalog"
    export(sqlite_ledger, catalog)
    items_dir = catalog / "default-tiles" / "items"
    features = [json.loads(p.read_text()) for p in sorted(items_dir.glob("*.json"))]
    search = items_dir / "search.json"  # beside the items, so their relative hrefs still hold
    search.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    mosaic = gdal.Open(str(search))
    assert mosaic is not None and mosaic.GetDriver().ShortName == "STACIT"
    gt = mosaic.GetGeoTransform()
    for z, x, y in tiles:
        path = tmp_path / "tiles" / f"{z}-{x}-{y}.png"
        tile_ds = gdal.Open(str(path))
        assert mosaic.RasterCount == tile_ds.RasterCount
        west, _, _, north = tile_bounds(z, x, y)
        xoff = round((west - gt[0]) / gt[1])
        yoff = round((north - gt[3]) / gt[5])
        for b in range(1, tile_ds.RasterCount + 1):
            expected = tile_ds.GetRasterBand(b).ReadRaster()
            assert mosaic.GetRasterBand(b).ReadRaster(xoff, yoff, 256, 256) == expected, (path, b)


def test_a_collections_extent_across_the_antimeridian_is_joined_not_the_whole_band(
        tmp_path, sqlite_ledger):
    """Two outputs, one east of 160E and one across the antimeridian (178.8E to 179.4W): the
    collection's extent is joined on longitudes 0..360, as the Python package's Dagster footprint
    joins them, west > east when it crosses (160 to 179.4W), not the whole band of longitudes."""
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    near = make_source(tmp_path / "near.tif", size=150, bands=1, epsg=4326,
                       origin=(160.0, 10.0), pixel=0.1)
    across = make_source(tmp_path / "across.tif", size=200, bands=1, epsg=32660,
                         origin=(700000.0, 1100000.0), pixel=1000.0)
    for src in (near, across):
        run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{src}.out.tif"], env=env,
            check=True)
    export(sqlite_ledger, tmp_path / "catalog")
    (collection,) = (tmp_path / "catalog").glob("*/collection.json")
    west, south, east, north = json.loads(collection.read_text())["extent"]["spatial"]["bbox"][0]
    assert west == pytest.approx(160.0) and east == pytest.approx(-179.3533, abs=1e-3)
    assert south == pytest.approx(-5.0) and north == pytest.approx(10.0)
