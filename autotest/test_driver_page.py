# SPDX-License-Identifier: MIT
"""docs/driver.rst, the driver's page in GDAL's documentation style, against what the driver
itself declares (what `gdalinfo --format IDEM` prints) and the configuration reference, so the
two cannot drift: every creation option of the driver's list with its default, the capabilities
it declares and only those, and the same configuration options as docs/configuration.md."""

import os
import re
import xml.etree.ElementTree as ET

from idem_testlib import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = open(os.path.join(ROOT, "docs", "driver.rst"), encoding="utf-8").read()

DECLARED = """
import json
from osgeo import gdal
d = gdal.GetDriverByName('IDEM')
print(json.dumps({k: d.GetMetadataItem(k) for k in (
    'DMD_LONGNAME', 'DMD_HELPTOPIC', 'DMD_CREATIONOPTIONLIST', 'DCAP_CREATE', 'DCAP_CREATECOPY',
    'DCAP_VIRTUALIO', 'DCAP_OPEN', 'DCAP_VECTOR')}))
"""


def declared():
    import json
    return json.loads(run(["/usr/bin/python3", "-c", DECLARED], check=True).stdout)


def section(title):
    """The text of the page's section `title` (up to the next section)."""
    found = re.search(rf"^{re.escape(title)}\n-+\n(.*?)(?=^\S[^\n]*\n-+\n|\Z)", PAGE, re.S | re.M)
    assert found, f"docs/driver.rst has no section {title!r}"
    return found.group(1)


def test_the_page_names_the_driver_and_is_its_help_topic():
    meta = declared()
    assert f"IDEM -- {meta['DMD_LONGNAME']}" in PAGE
    assert ".. shortname:: IDEM" in PAGE
    assert meta["DMD_HELPTOPIC"] == "docs/driver.rst"


def test_every_creation_option_is_on_the_page_with_its_default():
    options = ET.fromstring(declared()["DMD_CREATIONOPTIONLIST"]).findall("Option")
    text = section("Creation options")
    documented = re.findall(r"\.\. co:: (\S+)", text)
    assert documented == [o.get("name") for o in options]
    for option in options:
        entry = text.split(f".. co:: {option.get('name')}\n", 1)[1].split(".. co::", 1)[0]
        if option.get("default") is not None:
            assert f":default: {option.get('default')}\n" in entry, option.get("name")
        else:
            assert ":default:" not in entry, option.get("name")


def test_the_capabilities_are_the_declared_ones():
    meta = declared()
    text = section("Driver capabilities")
    for capability, directive in (("DCAP_CREATE", "supports_create"),
                                  ("DCAP_CREATECOPY", "supports_createcopy"),
                                  ("DCAP_VIRTUALIO", "supports_virtualio"),
                                  ("DCAP_OPEN", "supports_open"),
                                  ("DCAP_VECTOR", "supports_vector")):
        assert (f".. {directive}::" in text) == (meta[capability] == "YES"), capability


def test_the_configuration_options_are_those_of_the_reference():
    reference = open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8").read()
    table = reference.split("## Config options", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"^\| `([A-Z_]+)` \|", table, re.M)
    assert len(names) > 10
    assert re.findall(r"\.\. config:: (\S+)", section("Configuration options")) == names
