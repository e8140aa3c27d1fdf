# SPDX-License-Identifier: MIT
"""Ledger: the `gdal-idem` command's answers (--json) as Python data."""

import json
import os
import shutil
import subprocess

from ._calls import _ERRORS, IdemError


def _program():
    found = os.environ.get("GDAL_IDEM") or shutil.which("gdal-idem")
    if not found:
        raise IdemError("usage", "the gdal-idem command is not on PATH: install gdal-idem, or "
                                 "set GDAL_IDEM to its path")
    return found


def _error_of(proc):
    """The IdemError a failed `gdal-idem --json` run stands for: its error object names the
    failure's kind (docs/cli.md, "Exit codes"); the exit code says it where the command printed
    none (2: usage, 3: the ledger cannot be reached)."""
    kind = {2: "usage", 3: "ledger_unreachable"}.get(proc.returncode, "internal")
    message = proc.stderr.strip() or f"gdal-idem exited {proc.returncode}"
    for line in reversed(proc.stdout.splitlines()):
        try:
            error = json.loads(line).get("error")
        except (ValueError, AttributeError):
            continue
        if isinstance(error, dict) and "kind" in error:
            kind, message = error["kind"], error.get("message", message)
            break
    return _ERRORS.get(kind, IdemError)(kind, message)


class Ledger:
    """The ledger at `dsn` (sqlite:PATH, postgresql://..., a libpq keyword string; None: what
    the gdal-idem command uses by default, IDEM_LEDGER or the per-user SQLite file). Each method
    runs `gdal-idem --json` (docs/cli.md) and returns what it printed, parsed: one reader of the
    ledger's schema, the command's."""

    def __init__(self, dsn=None):
        self.dsn = dsn

    def _run(self, *args, stdin=None, json_output=True):
        command = [_program()]
        if self.dsn is not None:
            command += ["--ledger", str(self.dsn)]
        if json_output:
            command.append("--json")
        command += ["-q", *[str(a) for a in args]]
        proc = subprocess.run(command, input=stdin, capture_output=True, text=True)
        if proc.returncode not in (0, 1):  # 1: problems found, which the answer describes
            raise _error_of(proc)
        return proc

    def _json(self, *args):
        return json.loads(self._run(*args).stdout)

    @staticmethod
    def _scope(namespace, layer):
        return [*(["--namespace", namespace] if namespace else []),
                *(["--layer", layer] if layer else [])]

    def status(self, namespace=None, layer=None):
        """Counts: completed, in_flight, stale, released, superseded... (gdal-idem status)."""
        return self._json("status", *self._scope(namespace, layer))

    def inflight(self, all=False, namespace=None, layer=None):  # noqa: A002 (the CLI's flag)
        """Claims whose lease expired, or with all=True every claim (gdal-idem inflight)."""
        return self._json("inflight", *(["--all"] if all else []),
                          *self._scope(namespace, layer))

    def explain(self, output):
        """Why the output at `output` was rebuilt: the differences between its last two works
        (gdal-idem explain --last)."""
        return self._json("explain", "--last", os.fspath(output))

    def verify(self, namespace=None, layer=None, checksum=False, dry_run=True):
        """Checks the completed outputs (gdal-idem verify). dry_run=True (the default here)
        changes nothing; dry_run=False drops the rows of outputs found bad."""
        return self._json("verify", *self._scope(namespace, layer),
                          *(["--checksum"] if checksum else []),
                          *(["--dry-run"] if dry_run else []))

    def key(self, command):
        """The key a command (a list of words: ["gdalwarp", ...]) gets, without running it:
        {"key", "destination", "work"} (gdal-idem key)."""
        return self._json("key", "--", *command)

    def pending(self, commands):
        """Of `commands` (command lines, as text), those whose work is not done (gdal-idem
        pending), in their order."""
        text = "".join(line.rstrip("\n") + "\0" for line in commands)
        proc = self._run("pending", "--null", "-", stdin=text, json_output=False)
        return [line for line in proc.stdout.split("\0") if line]
