# SPDX-License-Identifier: MIT
"""The golden key corpus: fixed commands on a checked-in source must keep their keys.

A key change breaks every ledger's memory of completed work, so it is allowed only together with
a k_algo_version bump (src/key/work_key.hpp). After bumping, regenerate the corpus with

    IDEM_REGENERATE_GOLDEN_KEYS=1 IDEM_BUILD_DIR=build /usr/bin/python3 -m pytest \
        autotest/test_key_golden.py -p no:cacheprovider

which refuses to run while the version in autotest/data/golden_keys.json equals the current one.
See docs/keys.md.

The corpus is checked on every GDAL the project supports (docs/operations.md). A case whose grid
the command leaves to GDAL may have another key where a GDAL release computes another grid (an
output with another geotransform is other work): such keys are listed per GDAL minor version in
the case's "gdal_keys", with the reason. A case whose grid the command pins ("pinned": true:
-te with -ts or -tr, a gdal_translate; -tap alone does not: GDAL still computes the extent) has one key on every GDAL, and no "gdal_keys"."""

import json
import os
import re

import pytest

from conftest import DATA_DIR, ROOT, dry_run_key

GOLDEN_FILE = os.path.join(DATA_DIR, "golden_keys.json")
DESTINATION = "/vsiidem//idem-golden/out.tif"  # absolute, never written (dry run)
SRC = "key_golden_src.tif"
CUTLINE = "key_golden_cutline.geojson"

CASES = [
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-r", "bilinear", "-co",
                  "COMPRESS=DEFLATE", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:4326", "-tr", "0.0005", "0.0005", "-r", "cubic",
                  "-dstnodata", "255", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-cutline", CUTLINE, "-crop_to_cutline", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-et", "0", "-ot", "UInt16", "-co",
                  "FORMAT=COG", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-co", "NAMESPACE=golden", SRC,
                  DESTINATION]),
    ("gdal_translate", ["-of", "IDEM", "-outsize", "32", "24", "-r", "average", SRC,
                        DESTINATION]),
    ("gdal_translate", ["-of", "IDEM", "-b", "2", "-a_nodata", "5", SRC, DESTINATION]),
    ("gdal_translate", ["-of", "IDEM", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-te", "1657000", "5630000", "1667000",
                  "5640000", "-ts", "64", "64", "-r", "bilinear", SRC, DESTINATION]),
    ("gdalwarp", ["-of", "IDEM", "-t_srs", "EPSG:3857", "-tap", "-tr", "50", "50", SRC,
                  DESTINATION]),
]


def pinned(program, args):
    """Whether the command fixes the output grid itself (its key must not depend on GDAL)."""
    return program == "gdal_translate" or ("-te" in args and ("-ts" in args or "-tr" in args))


def gdal_minor():
    from osgeo import gdal
    number = int(gdal.VersionInfo("VERSION_NUM"))
    return f"{number // 1000000}.{number // 10000 % 100}"


def expected_key(case):
    return case.get("gdal_keys", {}).get(gdal_minor(), {}).get("key", case["key"])


def current_algo_version():
    header = open(os.path.join(ROOT, "src", "key", "work_key.hpp")).read()
    return int(re.search(r"k_algo_version\s*=\s*(\d+)", header).group(1))


def compute_corpus():
    """The corpus on this GDAL (the reference one, 3.6: its keys go in "key"; other GDALs' keys
    are added by hand to "gdal_keys", with the reason, after checking that the output differs)."""
    return [{"program": program, "args": args, "pinned": pinned(program, args),
             "key": dry_run_key(program, args, cwd=DATA_DIR)} for program, args in CASES]


@pytest.mark.golden
def test_key_golden_corpus_unchanged():
    version = current_algo_version()
    stored = json.load(open(GOLDEN_FILE)) if os.path.exists(GOLDEN_FILE) else None
    if os.environ.get("IDEM_REGENERATE_GOLDEN_KEYS"):
        if stored is not None and stored["algo_version"] == version:
            pytest.fail(f"refusing to regenerate {GOLDEN_FILE}: k_algo_version is still "
                        f"{version}; bump it in src/key/work_key.hpp first (docs/keys.md)")
        with open(GOLDEN_FILE, "w") as f:
            json.dump({"algo_version": version, "cases": compute_corpus()}, f, indent=1)
            f.write("\n")
        return
    assert stored is not None, f"{GOLDEN_FILE} is missing"
    assert stored["algo_version"] == version, (
        f"k_algo_version is {version} but the corpus was made with {stored['algo_version']}: "
        "regenerate it (see this file's docstring)")
    changed = []
    for case in stored["cases"]:
        key = dry_run_key(case["program"], case["args"], cwd=DATA_DIR)
        if key != expected_key(case):
            changed.append(f"{case['program']} {' '.join(case['args'])} on GDAL {gdal_minor()}: "
                           f"{expected_key(case)} -> {key}")
    assert not changed, ("keys changed without a k_algo_version bump:\n" + "\n".join(changed))


def test_key_golden_corpus_covers_every_case():
    stored = json.load(open(GOLDEN_FILE))
    assert [(c["program"], c["args"]) for c in stored["cases"]] == [(p, a) for p, a in CASES]
    assert len({c["key"] for c in stored["cases"]}) == len(CASES)
    for case in stored["cases"]:
        assert case.get("pinned", False) == pinned(case["program"], case["args"]), case["args"]
        if case.get("pinned"):
            assert "gdal_keys" not in case, f"a pinned grid has one key on every GDAL: {case}"
        for version, entry in case.get("gdal_keys", {}).items():
            assert entry.get("why"), f"{case['args']}: GDAL {version}'s key needs a reason"
