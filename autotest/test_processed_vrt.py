# SPDX-License-Identifier: MIT
"""A VRTProcessedDataset (GDAL 3.9 and later) whose steps read other datasets (LocalScaleOffset's
gain and offset, Trimming's trimming dataset): those datasets decide pixels as the input does, so
the key holds what they contain, not their names (docs/keys.md, "Source identity")."""

import numpy as np
import pytest
from osgeo import gdal

from idem_testlib import (assert_translation_rebuilt_after, env_with,  # noqa: F401
                          gdal_at_least, make_source, sqlite_ledger)

gdal.UseExceptions()

pytestmark = pytest.mark.skipif(not gdal_at_least("3.9"),
                                reason="VRTProcessedDataset came with GDAL 3.9")

PROCESSED = """<VRTDataset subClass="VRTProcessedDataset">
  <Input><SourceFilename relativeToVRT="1">src.tif</SourceFilename></Input>
  <ProcessingSteps>
    <Step name="scale">
      <Algorithm>LocalScaleOffset</Algorithm>
      <Argument name="relativeToVRT">true</Argument>
      <Argument name="gain_dataset_filename_1">gain.tif</Argument>
      <Argument name="gain_dataset_band_1">1</Argument>
      <Argument name="offset_dataset_filename_1">offset.tif</Argument>
      <Argument name="offset_dataset_band_1">1</Argument>
    </Step>
  </ProcessingSteps>
</VRTDataset>
"""


def write_scene(directory, gain):
    make_source(directory / "src.tif", size=64, bands=1, dtype=gdal.GDT_Float32)
    for name, value in (("gain.tif", gain), ("offset.tif", 3.0)):
        make_source(directory / name, size=64, bands=1, dtype=gdal.GDT_Float32)
        ds = gdal.Open(str(directory / name), gdal.GA_Update)
        values = np.full((64, 64), value, np.float64)
        values[20:40, 20:40] += 1.0
        ds.GetRasterBand(1).WriteArray(values)
        ds = None


@pytest.mark.parametrize("through", ["itself", "another_vrt"])
def test_a_changed_gain_dataset_is_rebuilt_not_skipped(tmp_path, sqlite_ledger, through):  # noqa: F811
    write_scene(tmp_path, gain=0.5)
    (tmp_path / "processed.vrt").write_text(PROCESSED)
    source = "processed.vrt"
    if through == "another_vrt":
        gdal.BuildVRT(str(tmp_path / "outer.vrt"), [str(tmp_path / "processed.vrt")]).FlushCache()
        source = "outer.vrt"
    assert_translation_rebuilt_after(lambda: write_scene(tmp_path, gain=2.0), source,
                                     tmp_path / "out.tif", sqlite_ledger,
                                     env_with(IDEM_LEDGER=sqlite_ledger.dsn), tmp_path)
