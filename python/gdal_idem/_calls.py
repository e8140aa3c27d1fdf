# SPDX-License-Identifier: MIT
"""warp() and translate(): gdal.Warp and gdal.Translate through IDEM, with a Result."""

import contextlib
import hashlib
import json
import os

from osgeo import gdal

_OUTCOMES = {"BUILT": "built", "REBUILT": "rebuilt", "SKIPPED": "skipped"}


class IdemError(RuntimeError):
    """A call through IDEM failed. `kind` says why, for programs: "busy", "lost_claim",
    "refused_destination", "ledger_unreachable", "store_unreachable", "ledger", "usage",
    "source", "io" or "internal" (the driver's ERROR_KIND in lower case), or "gdal" when GDAL failed before IDEM
    was called. `message` is the driver's (or GDAL's) message; `key` the work's key once known;
    `output` the output as the ledger names it, once known."""

    def __init__(self, kind, message, key=None, output=None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.key = key
        self.output = output


class BusyError(IdemError):
    """Another worker holds the work, and the call was told not to wait (IDEM_ON_BUSY=FAIL)."""


class LostClaimError(IdemError):
    """The call's claim was taken over or lost: nothing of it was published. Retry."""


class RefusedDestinationError(IdemError):
    """The output path is not one IDEM may write (a link, a directory, a source...)."""


class LedgerUnreachableError(IdemError):
    """The ledger's database could not be reached."""


class StoreUnreachableError(IdemError):
    """The object store could not be asked about the output (a connection error, 403, 429 or
    5xx): nothing was decided on it and its ledger row was kept. Retry once it answers."""


_ERRORS = {"busy": BusyError, "lost_claim": LostClaimError,
           "refused_destination": RefusedDestinationError,
           "ledger_unreachable": LedgerUnreachableError,
           "store_unreachable": StoreUnreachableError}


class Result:
    """What one call did: `outcome` ("built", "rebuilt" or "skipped"), `key`, `attempt` (of the
    claim that built it, or of the completion a skip found), `output` (as the ledger names it),
    `files` (the output's files, the primary first), and `timings` (milliseconds: "key",
    "write", "elapsed")."""

    def __init__(self, report):
        self.outcome = _OUTCOMES[report["OUTCOME"]]
        self.key = report["KEY"]
        self.attempt = int(report["ATTEMPT"])
        self.output = report["OUTPUT"]
        self.files = json.loads(report.get("FILES", "[]"))
        self.timings = {name: float(report[item]) for name, item in
                        (("key", "KEY_MS"), ("write", "WRITE_MS"), ("elapsed", "ELAPSED_MS"))
                        if item in report}

    @property
    def skipped(self):
        return self.outcome == "skipped"

    def sha256(self):
        """The SHA-256 of each of the output's files ({path: hex digest}), read now through
        GDAL's file system (local paths and /vsis3/, /vsigs/, /vsiaz/ objects alike)."""
        return {path: _sha256_of(path) for path in self.files}

    def as_dict(self):
        """The result as plain data (JSON-ready)."""
        return {"outcome": self.outcome, "key": self.key, "attempt": self.attempt,
                "output": self.output, "files": list(self.files), "timings": dict(self.timings)}

    def __repr__(self):
        return (f"Result(outcome={self.outcome!r}, output={self.output!r}, "
                f"key={self.key[:12]!r}, attempt={self.attempt})")


def _sha256_of(path):
    digest = hashlib.sha256()
    handle = gdal.VSIFOpenL(path, "rb")
    if handle is None:
        raise IdemError("io", f"cannot read {path}", output=path)
    try:
        while True:
            chunk = gdal.VSIFReadL(1, 1 << 20, handle)
            if not chunk:
                break
            digest.update(chunk)
    finally:
        gdal.VSIFCloseL(handle)
    return digest.hexdigest()


def _idem_path(dst):
    if isinstance(dst, gdal.Dataset):
        raise TypeError("IDEM writes a new output: give the output's path, not a dataset")
    path = os.fspath(dst)
    return path if path.startswith("/vsiidem/") else "/vsiidem/" + path


_MAX_LABEL_BYTES = 256  # as the driver's check_label (src/base/labels.hpp)


def _check_label(name, value):
    """The driver's rule for a namespace, layer or tile, checked here first: GDAL's C strings
    would cut a NUL before the driver sees it (running another namespace's work)."""
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7f), None)
    if bad is not None:
        raise IdemError("usage", f"{name} holds a control character (0x{ord(bad):02x}): give one "
                                 "line of printable characters (a NUL would be cut, a newline "
                                 "would split the ledger's listings)")
    if len(value.encode()) > _MAX_LABEL_BYTES:
        raise IdemError("usage", f"{name} is {len(value.encode())} bytes long: give at most "
                                 f"{_MAX_LABEL_BYTES}")


def _creation_options(kwargs, namespace, layer, tile):
    """kwargs' creationOptions as a list, with IDEM's: FORMAT (from format=), NAMESPACE, LAYER,
    TILE. format= becomes "IDEM"."""
    options = kwargs.pop("creationOptions", None) or []
    if isinstance(options, dict):
        options = [f"{name}={value}" for name, value in options.items()]
    elif isinstance(options, str):
        options = [options]
    options = list(options)
    given = kwargs.pop("format", None)
    if given is not None and given.upper() != "IDEM":
        options.append(f"FORMAT={given}")
    for name, value in (("NAMESPACE", namespace), ("LAYER", layer), ("TILE", tile)):
        if value is not None:
            _check_label(name, str(value))
            options.append(f"{name}={value}")
    text = kwargs.get("options")
    words = text.split() if isinstance(text, str) else list(text or [])
    if "-of" in words:
        raise ValueError("give the output format as format=..., not -of in options: IDEM's "
                         "FORMAT creation option is made from it")
    kwargs["format"] = "IDEM"
    kwargs["creationOptions"] = options
    return kwargs


@contextlib.contextmanager
def _thread_config(options):
    """This thread's GDAL configuration with `options` set, the previous values put back."""
    previous = {name: gdal.GetThreadLocalConfigOption(name, None) for name in options}
    for name, value in options.items():
        gdal.SetThreadLocalConfigOption(name, None if value is None else str(value))
    try:
        yield
    finally:
        for name, value in previous.items():
            gdal.SetThreadLocalConfigOption(name, value)


def _call(function, dst, src, kwargs, ledger, namespace, layer, tile, config):
    kwargs = _creation_options(dict(kwargs), namespace, layer, tile)
    settings = dict(config or {})
    if ledger is not None:
        settings["IDEM_LEDGER"] = ledger
    driver = _emptied_driver()
    dataset, gdal_message = None, None
    with _thread_config(settings):
        try:
            dataset = function(_idem_path(dst), src, **kwargs)
        except RuntimeError as error:  # gdal.UseExceptions() is on
            gdal_message = str(error)
        if dataset is None and gdal_message is None:
            gdal_message = gdal.GetLastErrorMsg() or "the call failed"
    dataset = None  # closed: the output is complete on disk either way
    report = driver.GetMetadata("RESULT") or {}
    outcome = report.get("OUTCOME")
    if outcome in _OUTCOMES:
        if gdal_message is not None:  # the output was made, but GDAL failed after IDEM returned
            raise IdemError("gdal", gdal_message, report.get("KEY"), report.get("OUTPUT"))
        return Result(report)
    if outcome == "FAILED":
        kind = report.get("ERROR_KIND", "INTERNAL").lower()
        raise _ERRORS.get(kind, IdemError)(kind, report.get("ERROR", gdal_message),
                                           report.get("KEY"), report.get("OUTPUT"))
    if outcome == "DRY_RUN":
        raise IdemError("usage", "IDEM_DRY_RUN is set: nothing was built (use `gdal-idem key` "
                                 "or Ledger().key() to compute a key)", report.get("KEY"))
    # IDEM was not called: GDAL failed before (a source it cannot open, bad options).
    raise IdemError("gdal", gdal_message or "GDAL did not call the IDEM driver")


def _emptied_driver():
    """The IDEM driver, with this thread's report of the last call emptied: after a call, an
    empty report means GDAL failed before calling the driver."""
    driver = gdal.GetDriverByName("IDEM")
    if driver is None:
        raise IdemError("usage", "GDAL has no IDEM driver: install gdal-idem, or point "
                                 "GDAL_DRIVER_PATH at the directory of gdal_IDEM.so")
    driver.SetMetadata({}, "RESULT")
    return driver


def work_key(kind, dst, src, *, namespace=None, layer=None, tile=None, config=None, **kwargs):
    """The key that warp() ("warp") or translate() ("translate") of these arguments gets,
    computed by a dry run (IDEM_DRY_RUN, this thread only): nothing is written, no ledger is
    touched."""
    function = {"warp": gdal.Warp, "translate": gdal.Translate}[kind]
    kwargs = _creation_options(dict(kwargs), namespace, layer, tile)
    settings = dict(config or {}, IDEM_DRY_RUN="YES")
    driver = _emptied_driver()
    with _thread_config(settings), _quiet_gdal():
        try:
            dataset = function(_idem_path(dst), src, **kwargs)
        except RuntimeError as error:
            raise IdemError("gdal", str(error)) from None
    report = driver.GetMetadata("RESULT") or {}
    if dataset is None or report.get("OUTCOME") != "DRY_RUN":
        raise IdemError(report.get("ERROR_KIND", "GDAL").lower(),
                        report.get("ERROR") or gdal.GetLastErrorMsg() or "the dry run failed")
    return report["KEY"]


@contextlib.contextmanager
def _quiet_gdal():
    """GDAL's messages held back (a dry run's warning that it is one)."""
    gdal.PushErrorHandler("CPLQuietErrorHandler")
    try:
        yield
    finally:
        gdal.PopErrorHandler()


def warp(dst, src, *, ledger=None, namespace=None, layer=None, tile=None, config=None,
         **kwargs):
    """gdal.Warp(dst, src, **kwargs) through IDEM: `format` is the real output format (GTiff by
    default), `dst` a path (under /vsiidem/ unless it already is). `ledger` (a DSN), `namespace`,
    `layer` and `tile` are IDEM's; `config`, IDEM_* configuration options for this call (set for
    this thread only). Returns a Result; raises IdemError (or a subclass) on failure."""
    return _call(gdal.Warp, dst, src, kwargs, ledger, namespace, layer, tile, config)


def translate(dst, src, *, ledger=None, namespace=None, layer=None, tile=None, config=None,
              **kwargs):
    """gdal.Translate(dst, src, **kwargs) through IDEM, as warp()."""
    return _call(gdal.Translate, dst, src, kwargs, ledger, namespace, layer, tile, config)
