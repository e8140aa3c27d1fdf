# SPDX-License-Identifier: MIT
"""The tile batch the orchestrator tests run under Prefect, Dagster and Dask (run by the tests'
venv, tools/pyenv/venv, which sees Debian's osgeo.gdal): a grid of EPSG:3857 tiles over one
source, each warped through IDEM either as users write it in a shell (`gdalwarp` in a
subprocess) or in the task's own process (`gdal.Warp`), and the faults the tests inject.

A fault is decided by files, so it strikes the first attempt of a tile only, whichever
orchestrator retries it and in whichever process: `killed/NAME` is written when the attempt of
tile NAME is killed, and an attempt that finds it runs normally.

Everything a batch needs comes from the environment the test sets: IDEM_LEDGER,
IDEM_STALE_SECONDS, GDAL_DRIVER_PATH, and BATCH_DIR (the source, outputs and fault markers)."""

import json
import os
import signal
import subprocess
import threading
import time
import uuid

from osgeo import gdal

gdal.UseExceptions()

TILE_PIXELS = 64
WARP = ["-t_srs", "EPSG:3857", "-ts", str(TILE_PIXELS), str(TILE_PIXELS), "-r", "bilinear"]
CREATION = ["FORMAT=GTiff", "NAMESPACE=orchestrated", "LAYER=tiles"]


class Batch:
    """The batch in BATCH_DIR: its source, its tiles (batch.json, written by the test) and the
    tiles whose first attempt is killed."""

    def __init__(self, directory=None):
        self.dir = directory or os.environ["BATCH_DIR"]
        with open(os.path.join(self.dir, "batch.json"), encoding="utf-8") as f:
            spec = json.load(f)
        self.source = spec["source"]
        self.tiles = spec["tiles"]  # name -> [xmin, ymin, xmax, ymax]
        self.kill = set(spec.get("kill", []))
        self.kill_at = spec.get("kill_at", "before_complete")
        self.republish = set(spec.get("republish", []))
        os.makedirs(os.path.join(self.dir, "killed"), exist_ok=True)
        os.makedirs(os.path.join(self.dir, "tiles"), exist_ok=True)

    def output(self, name):
        return os.path.join(self.dir, "tiles", name + ".tif")

    def gdalwarp_command(self, name):
        xmin, ymin, xmax, ymax = self.tiles[name]
        return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", *sum(
            (["-co", c] for c in CREATION), []), *WARP, "-te", repr(xmin), repr(ymin),
            repr(xmax), repr(ymax), self.source, "/vsiidem/" + self.output(name)]

    def _marker(self, name):
        return os.path.join(self.dir, "killed", name)

    def _to_kill(self, name):
        return name in self.kill and not os.path.exists(self._marker(name))

    def _pause(self, name):
        """The file the pause creates when the warp of `name` reaches it, and the options that
        make it pause there (for ten minutes: until it is killed)."""
        reached = os.path.join(self.dir, "killed", f".reached-{name}-{uuid.uuid4().hex}")
        return reached, {"IDEM_TEST_PAUSE_AT": self.kill_at, "IDEM_TEST_PAUSE_SECONDS": "600",
                         "IDEM_TEST_REACHED_FILE": reached}

    def _killed(self, name):
        with open(self._marker(name), "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
        if name in self.republish:
            republish(self.source)

    def warp_subprocess(self, name):
        """gdalwarp in a child process; on a tile's first attempt to kill, the child is killed
        (SIGKILL) once it reaches the pause point, and this attempt fails."""
        cmd = self.gdalwarp_command(name)
        if not self._to_kill(name):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"gdalwarp of tile {name} exited {proc.returncode}: "
                                   f"{proc.stderr}")
            return self.output(name)
        reached, pause = self._pause(name)
        proc = subprocess.Popen(cmd, env=dict(os.environ, **pause), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while not os.path.exists(reached) and proc.poll() is None:
            time.sleep(0.01)  # polling for the pause's file
        if os.path.exists(reached):
            proc.send_signal(signal.SIGKILL)
            os.unlink(reached)
        proc.wait()
        self._killed(name)
        raise RuntimeError(f"the warp of tile {name} was killed (exit {proc.returncode})")

    def warp_in_process(self, name):
        """gdal.Warp in this process; on a tile's first attempt to kill, this whole process is
        killed (SIGKILL) once the warp reaches the pause point, as the OOM killer would."""
        xmin, ymin, xmax, ymax = self.tiles[name]
        warped = threading.Event()  # the warp returned without pausing (e.g. another did it)
        pause = {}
        if self._to_kill(name):
            reached, pause = self._pause(name)
            for key, value in pause.items():
                gdal.SetThreadLocalConfigOption(key, value)

            def kill_when_paused():
                while not os.path.exists(reached):
                    if warped.wait(0.01):  # polling for the pause's file
                        return
                os.unlink(reached)
                self._killed(name)
                os.kill(os.getpid(), signal.SIGKILL)

            threading.Thread(target=kill_when_paused, daemon=True).start()
        try:
            ds = gdal.Warp("/vsiidem/" + self.output(name), self.source, format="IDEM",
                           options=list(WARP), outputBounds=(xmin, ymin, xmax, ymax),
                           creationOptions=CREATION)
            ds = None
        finally:
            warped.set()
            for key in pause:
                gdal.SetThreadLocalConfigOption(key, None)
        return self.output(name)


def republish(source):
    """Publishes a new version of `source` as a data pipeline does: new pixels written beside
    it, renamed over it."""
    staging = source + ".new.tif"
    gdal.Translate(staging, source, options=["-scale", "0", "255", "255", "0"])
    os.replace(staging, source)
