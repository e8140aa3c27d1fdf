# SPDX-License-Identifier: MIT
"""The digest cache's racy entry (docs/keys.md, "Digest cache"): a source changed within the
racy window before it was hashed can change again without a new (device, inode, size, mtime,
ctime), so its digest is not cached and the next run hashes it again.

The case made for real: a writer holding the source mapped writes a pixel, IDEM builds, the
writer writes another pixel to the same page (already dirty: the kernel updates no time), and
the rerun must rebuild with the new pixel, as `gdal-idem key` predicts."""

import mmap
import os

import pytest
from osgeo import gdal

from idem_testlib import GDAL_IDEM, env_with, make_source, run, sqlite_ledger  # noqa: F401

gdal.UseExceptions()


def translate(src, dst):
    return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=GTiff", src, dst]


def times(path):
    info = os.stat(path)
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def write_map_build_write(tmp_path, attempt, out, env):
    """A source written through a mapping, built, then written again on the same page: whether
    the second write left the file's times as they were (the file system may have written the
    page back meanwhile, after which a write faults and updates them)."""
    src = make_source(tmp_path / f"scene{attempt}.tif", size=64, bands=1, seed=attempt)
    dataset = gdal.Open(src)
    offset = int(dataset.GetRasterBand(1).GetMetadataItem("BLOCK_OFFSET_0_0", "TIFF"))
    dataset = None
    with open(src, "r+b") as f:
        # Its blocks allocated and on disk first: a new file's pages are written back with the
        # next journal commit, which another process's fsync may start at any moment.
        os.fsync(f.fileno())
        mapped = mmap.mmap(f.fileno(), 0)
        try:
            mapped[offset] = (mapped[offset] + 1) % 256  # the page is now dirty
            run(translate(src, out), env=env, check=True)
            before = times(src)
            mapped[offset + 1] = (mapped[offset + 1] + 7) % 256  # same page: no new time
            return src, times(src) == before
        finally:
            mapped.close()


def test_a_write_that_leaves_the_times_as_they_are_is_not_skipped(tmp_path, sqlite_ledger):
    out = str(tmp_path / "out.tif")
    env = env_with(IDEM_LEDGER=sqlite_ledger.dsn)
    for attempt in range(10):
        src, racy = write_map_build_write(tmp_path, attempt, out, env)
        if racy:
            break
    else:
        pytest.skip("the file system wrote the page back before every second write")
    key = run([GDAL_IDEM, "key", "--", *translate(src, out)], env=env, check=True)
    run(translate(src, out), env=env, check=True)
    latest = sqlite_ledger.rows()[-1]
    assert latest["work_key"] == key.stdout.split()[-1], "the rerun was skipped onto old pixels"
    assert latest["completed_at"] is not None
    direct = str(tmp_path / "direct.tif")
    gdal.Translate(direct, src, format="GTiff")
    assert gdal.Open(out).ReadRaster() == gdal.Open(direct).ReadRaster()
