# SPDX-License-Identifier: MIT
"""gdal_idem: IDEM from Python, with results that say what happened.

    import gdal_idem
    result = gdal_idem.warp("tiles/0.tif", "scene.tif", dstSRS="EPSG:3857", format="COG")
    result.outcome   # "built", "rebuilt" or "skipped"
    result.key       # the work's key

warp() and translate() take gdal.Warp's and gdal.Translate's arguments; the output goes through
IDEM (the driver "IDEM", the path under /vsiidem/). What each call did is read from the IDEM
driver's RESULT metadata (docs/configuration.md, "The result of a call"). Ledger() answers what
`gdal-idem --json` answers, as Python data. Pure Python over Debian's osgeo.gdal: the plugin must
be where GDAL finds it (installed, or GDAL_DRIVER_PATH).
"""

from ._calls import (BusyError, IdemError, LedgerUnreachableError, LostClaimError,
                     RefusedDestinationError, Result, StoreUnreachableError, translate, warp,
                     work_key)
from ._ledger import Ledger

__all__ = ["warp", "translate", "work_key", "Result", "IdemError", "BusyError", "LostClaimError",
           "RefusedDestinationError", "LedgerUnreachableError", "StoreUnreachableError",
           "Ledger"]
__version__ = "0.1.0"
