# SPDX-License-Identifier: MIT
# The /vsiidem/ virtual filesystem (plugin/vsiidem.cpp) through real GDAL programs, osgeo.gdal
# and rasterio: path mapping, write-to-temporary-then-rename on close, a killed writer leaving no
# output, deferred unlinks (hidden at once, carried out at process exit), pass-through of
# everything else.
#
# Run: GDAL_DRIVER_PATH=<build>/gdalplugins /usr/bin/python3 -m pytest autotest/test_vsiidem.py
# (without GDAL_DRIVER_PATH, $IDEM_BUILD_DIR/gdalplugins, else build/gdalplugins, is used).
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest
from osgeo import gdal

from idem_testlib import gdal_at_least, wait_until

gdal.UseExceptions()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN_DIR = os.environ.get("GDAL_DRIVER_PATH") or os.path.join(
    os.environ.get("IDEM_BUILD_DIR", os.path.join(ROOT, "build")), "gdalplugins")
TEMP_PREFIX = ".idem-tmp-"
# A deferred unlink carried out at exit asks the driver to forget ledger rows first; the
# processes started here use a throwaway ledger, never a real one.
LEDGER_DIR = tempfile.mkdtemp(prefix="idem-vsiidem-ledger-")


def _ensure_handler_in_this_process():
    if gdal.GetFileMetadata("/vsiidem/", "IDEM_HANDLER"):
        return
    gdal.SetConfigOption("GDAL_DRIVER_PATH", PLUGIN_DIR)
    gdal.AllRegister()


_ensure_handler_in_this_process()


def env(fsync=False):
    result = dict(os.environ)
    result["GDAL_DRIVER_PATH"] = PLUGIN_DIR
    # Most tests skip fsync to stay fast (the rename stays atomic); some keep it.
    result["IDEM_FSYNC"] = "YES" if fsync else "NO"
    result["IDEM_LEDGER"] = "sqlite:" + os.path.join(LEDGER_DIR, "ledger.db")
    return result


@pytest.fixture(scope="module", autouse=True)
def _remove_ledger_dir():
    yield
    shutil.rmtree(LEDGER_DIR, ignore_errors=True)


def run(args, cwd=None, check=True, timeout=300, fsync=False):
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env(fsync), capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


def run_python(code, cwd=None, check=True):
    """Run `code` in a fresh /usr/bin/python3 (a process of its own, so its exit is observed)."""
    return run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, check=check)


def temp_dirs(directory):
    return sorted(n for n in os.listdir(directory) if n.startswith(TEMP_PREFIX))


def vsiidem(path):
    """/vsiidem/ name of an absolute real path: /vsiidem//abs/path."""
    assert os.path.isabs(path)
    return "/vsiidem/" + str(path)


def pixels(path):
    ds = gdal.Open(str(path))
    return np.stack([ds.GetRasterBand(i + 1).ReadAsArray() for i in range(ds.RasterCount)])


@pytest.fixture
def source(tmp_path):
    """A small 2-band GeoTIFF with a pattern."""
    path = tmp_path / "src.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 300, 200, 2, gdal.GDT_Byte)
    ds.SetGeoTransform([500000, 10, 0, 4650000, 0, -10])
    yy, xx = np.mgrid[0:200, 0:300]
    ds.GetRasterBand(1).WriteArray(((xx + yy) % 251).astype(np.uint8))
    ds.GetRasterBand(2).WriteArray(((xx * 3) % 253).astype(np.uint8))
    ds = None
    return path


@pytest.fixture
def big_source(tmp_path_factory):
    """An 8k x 8k Byte raster of noise: DEFLATE takes seconds on it, time enough for a kill."""
    path = tmp_path_factory.mktemp("big") / "big.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 8192, 8192, 1, gdal.GDT_Byte)
    rng = np.random.default_rng(7)
    band = ds.GetRasterBand(1)
    for row in range(0, 8192, 1024):
        band.WriteArray(rng.integers(0, 256, (1024, 8192), dtype=np.uint8), 0, row)
    ds = None
    return path


def test_vsiidem_handler_installed():
    info = gdal.GetFileMetadata("/vsiidem/", "IDEM_HANDLER")
    assert info.get("VERSION") == "1"
    assert "/vsiidem/" in gdal.GetFileSystemsPrefixes()


def test_vsiidem_translate_relative_path(tmp_path, source):
    (tmp_path / "sub").mkdir()
    run(["gdal_translate", "-q", "-of", "GTiff", source, "/vsiidem/sub/out.tif"], cwd=tmp_path)
    out = tmp_path / "sub" / "out.tif"
    assert out.exists()
    assert np.array_equal(pixels(out), pixels(source))
    assert temp_dirs(tmp_path / "sub") == []
    assert sorted(os.listdir(tmp_path / "sub")) == ["out.tif"]


def test_vsiidem_translate_absolute_path(tmp_path, source):
    out = tmp_path / "abs.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", "-co", "COMPRESS=DEFLATE", source,
         vsiidem(out)], cwd="/", fsync=True)
    assert np.array_equal(pixels(out), pixels(source))
    assert temp_dirs(tmp_path) == []


def test_vsiidem_rerun_replaces_output_and_keeps_it(tmp_path, source):
    out = tmp_path / "out.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", source, vsiidem(out)])
    first_inode = out.stat().st_ino
    # gdal_translate deletes the existing output first (docs/internals.md §4): deferred, then
    # cancelled when the new file is renamed into place, so the new output survives the exit.
    run(["gdal_translate", "-q", "-of", "GTiff", "-b", "2", source, vsiidem(out)])
    assert out.exists()
    assert out.stat().st_ino != first_inode
    assert gdal.Open(str(out)).RasterCount == 1
    assert temp_dirs(tmp_path) == []


def test_vsiidem_missing_directory_is_reported(tmp_path, source):
    proc = run(["gdal_translate", "-q", "-of", "GTiff", source,
                vsiidem(tmp_path / "missing" / "out.tif")], check=False)
    assert proc.returncode != 0
    assert "does not exist; create it first" in proc.stderr
    assert not (tmp_path / "missing").exists()


def test_vsiidem_killed_writer_leaves_no_output(tmp_path, big_source):
    out = tmp_path / "killed.tif"
    proc = subprocess.Popen(["gdal_translate", "-q", "-of", "GTiff", "-co", "COMPRESS=DEFLATE",
                             "-co", "ZLEVEL=9", str(big_source), vsiidem(str(out))],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    def written_temp_file():
        for name in temp_dirs(tmp_path):
            candidate = tmp_path / name / "killed.tif"
            if candidate.exists() and candidate.stat().st_size > 0:
                return candidate
        return None

    wait_until(lambda: written_temp_file() is not None or proc.poll() is not None,
               "the writer's temporary file")
    temp_file = written_temp_file()
    assert temp_file is not None, "the temporary file never appeared: " + proc.stderr.read().decode()
    assert proc.poll() is None, "the writer finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    assert len(temp_dirs(tmp_path)) == 1  # left for `gdal-idem reap`
    assert temp_file.exists()


def test_vsiidem_killed_rewrite_keeps_previous_output(tmp_path, source, big_source):
    out = tmp_path / "kept.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", source, vsiidem(out)])
    before = out.read_bytes()
    proc = subprocess.Popen(["gdal_translate", "-q", "-of", "GTiff", "-co", "COMPRESS=DEFLATE",
                             "-co", "ZLEVEL=9", str(big_source), vsiidem(str(out))],
                            env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: temp_dirs(tmp_path) or proc.poll() is not None,
               "the writer's temporary directory")
    assert proc.poll() is None and temp_dirs(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The pre-delete was only recorded, and the process died before carrying it out.
    assert out.read_bytes() == before


def test_vsiidem_unlink_is_deferred_to_process_exit(tmp_path, source):
    target = tmp_path / "doomed.tif"
    target.write_bytes(source.read_bytes())
    inode = target.stat().st_ino
    proc = run_python(f"""
        import os
        from osgeo import gdal
        gdal.UseExceptions()
        name = {vsiidem(str(target))!r}
        assert gdal.Unlink(name) == 0
        assert os.path.exists({str(target)!r}), "deleted at once"
        assert gdal.VSIStatL(name) is None, "Stat must hide a pending unlink"
        assert "doomed.tif" not in (gdal.ReadDir({vsiidem(str(tmp_path))!r}) or [])
        assert gdal.GetFileMetadata(name, "IDEM_UNLINK_PENDING") == {{"PENDING": "YES"}}
        try:
            gdal.Open(name)
            raise SystemExit("Open must fail on a pending unlink")
        except RuntimeError:
            pass
        print("inode", os.stat({str(target)!r}).st_ino)
    """)
    assert f"inode {inode}" in proc.stdout
    assert not target.exists(), "the deferred unlink was not carried out at exit"


def test_vsiidem_forked_child_leaves_the_parents_unlinks_to_it(tmp_path, source):
    """A child forked after an unlink was deferred inherits it, but it is the parent's: the
    child's normal exit (atexit handlers run) must not carry it out; the parent's does."""
    target = tmp_path / "parents.tif"
    target.write_bytes(source.read_bytes())
    proc = run_python(f"""
        import os, sys
        from osgeo import gdal
        gdal.UseExceptions()
        assert gdal.Unlink({vsiidem(str(target))!r}) == 0
        child = os.fork()
        if child == 0:
            sys.exit(0)  # a normal exit: Python's and the C library's exit handlers run
        _, status = os.waitpid(child, 0)
        print("child exit", status, "file there", os.path.exists({str(target)!r}))
    """)
    assert "child exit 0 file there True" in proc.stdout, proc.stdout + proc.stderr
    assert not target.exists(), "the parent's deferred unlink was not carried out at its exit"


def test_vsiidem_publishing_does_not_block_other_threads(tmp_path, source):
    """A close publishes (renames, or uploads to object storage: seconds) without holding
    /vsiidem/'s process-wide lock: while one thread's close is held at its publish, another
    thread writes, closes and publishes its own file, and a deferred unlink made meanwhile of the
    path being published still happens at exit."""
    proc = run_python(f"""
        import os, threading, time
        from osgeo import gdal
        gdal.UseExceptions()
        a, b, c = ({vsiidem(str(tmp_path / "a.tif"))!r}, {vsiidem(str(tmp_path / "b.tif"))!r},
                   {vsiidem(str(tmp_path / "c.tif"))!r})
        src = {str(source)!r}
        events = []
        resume = {str(tmp_path / "resume")!r}
        def held_writer(name):
            gdal.SetThreadLocalConfigOption("IDEM_TEST_PAUSE_AT", "vsiidem_publish")
            gdal.SetThreadLocalConfigOption("IDEM_TEST_PAUSE_SECONDS", "120")
            gdal.SetThreadLocalConfigOption("IDEM_TEST_REACHED_FILE", name[len("/vsiidem/"):] + ".held")
            gdal.SetThreadLocalConfigOption("IDEM_TEST_RESUME_FILE", resume)
            gdal.Translate(name, src, format="GTiff")  # closes: held before publishing
            events.append(("held done", os.path.exists(name[len("/vsiidem/"):])))
        held = [threading.Thread(target=held_writer, args=(n,)) for n in (a, c)]
        for t in held:
            t.start()
        deadline = time.monotonic() + 120
        while not all(os.path.exists(n[len("/vsiidem/"):] + ".held") for n in (a, c)):
            assert time.monotonic() < deadline, "the writers never reached their publish"
            time.sleep(0.01)
        gdal.Translate(b, src, format="GTiff")  # while both are held at their publish
        events.append(("free done", os.path.exists(b[len("/vsiidem/"):]),
                       os.path.exists(a[len("/vsiidem/"):])))
        assert gdal.Unlink(c) == 0  # while c is being published: deleted at exit
        open(resume, "w").close()
        for t in held:
            t.join()
        print(events)
        assert events[0][0] == "free done", events
        assert events[0][1] and not events[0][2], events
        assert all(e[1] for e in events[1:]), events
        assert gdal.VSIStatL(c) is None, "c must stay hidden: its unlink is pending"
        print("ok")
    """)
    assert "ok" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "a.tif").exists() and (tmp_path / "b.tif").exists()
    assert not (tmp_path / "c.tif").exists(), "the unlink made during publishing was lost"
    assert temp_dirs(str(tmp_path)) == []


def test_vsiidem_cancelled_unlink_keeps_file(tmp_path, source):
    target = tmp_path / "kept.tif"
    target.write_bytes(source.read_bytes())
    stat_before = target.stat()
    run_python(f"""
        from osgeo import gdal
        name = {vsiidem(str(target))!r}
        assert gdal.Unlink(name) == 0
        # What an IDEM skip does (vsiidem_cancel_unlink) through the control domain.
        gdal.SetFileMetadata(name, {{}}, "IDEM_CANCEL_UNLINK")
        assert gdal.VSIStatL(name) is not None
    """)
    stat_after = target.stat()
    assert (stat_after.st_ino, stat_after.st_mtime_ns) == (stat_before.st_ino,
                                                          stat_before.st_mtime_ns)


def test_vsiidem_flush_carries_out_unlinks_now(tmp_path, source):
    target = tmp_path / "flushed.tif"
    target.write_bytes(source.read_bytes())
    run_python(f"""
        import os
        from osgeo import gdal
        assert gdal.Unlink({vsiidem(str(target))!r}) == 0
        assert os.path.exists({str(target)!r})
        gdal.SetFileMetadata("/vsiidem/", {{}}, "IDEM_FLUSH_UNLINKS")
        assert not os.path.exists({str(target)!r}), "flush did not delete"
    """)


def test_vsiidem_gdalmanage_delete_happens_at_exit(tmp_path, source):
    target = tmp_path / "managed.tif"
    target.write_bytes(source.read_bytes())
    run(["gdalmanage", "delete", vsiidem(str(target))])
    assert not target.exists()


def test_vsiidem_unlink_of_missing_file_fails(tmp_path):
    with pytest.raises(RuntimeError):
        gdal.Unlink(vsiidem(str(tmp_path / "nothing.tif")))


def test_vsiidem_unlink_of_a_file_removed_since_it_was_seen_succeeds(tmp_path):
    """Two workers preparing one output both delete its old sidecar: the second's delete finds
    it gone. A file this process saw (listed or found by stat) and another process removed
    since is deleted without an error; a name never seen still fails."""
    listed = tmp_path / "out.png.aux.xml"
    stated = tmp_path / "other.png.aux.xml"
    for path in (listed, stated):
        path.write_text("<PAMDataset/>")
    assert "out.png.aux.xml" in gdal.ReadDir(vsiidem(str(tmp_path)))
    assert gdal.VSIStatL(vsiidem(str(stated))) is not None
    os.unlink(listed)
    os.unlink(stated)
    gdal.ErrorReset()
    assert gdal.Unlink(vsiidem(str(listed))) == 0
    assert gdal.Unlink(vsiidem(str(stated))) == 0
    assert gdal.GetLastErrorMsg() == ""
    with pytest.raises(RuntimeError):
        gdal.Unlink(vsiidem(str(tmp_path / "never-seen.png.aux.xml")))
    assert sorted(os.listdir(tmp_path)) == []


def test_vsiidem_passes_stat_readdir_open_through(tmp_path, source):
    name = vsiidem(str(source))
    stat = gdal.VSIStatL(name)
    assert stat is not None and stat.size == source.stat().st_size
    assert not stat.IsDirectory()
    assert gdal.VSIStatL(vsiidem(str(tmp_path))).IsDirectory()
    assert gdal.VSIStatL(vsiidem(str(tmp_path / "absent.tif"))) is None
    assert sorted(gdal.ReadDir(vsiidem(str(tmp_path)))) == sorted(gdal.ReadDir(str(tmp_path)))
    ds = gdal.Open(name)
    assert (ds.RasterXSize, ds.RasterYSize, ds.RasterCount) == (300, 200, 2)
    assert np.array_equal(pixels(name), pixels(source))
    ds = None
    f = gdal.VSIFOpenL(name, "rb")
    head = gdal.VSIFReadL(1, 4, f)
    gdal.VSIFCloseL(f)
    assert head == source.read_bytes()[:4]

    sub = vsiidem(str(tmp_path / "made"))
    gdal.Mkdir(sub, 0o755)
    assert (tmp_path / "made").is_dir()
    gdal.Rename(name, vsiidem(str(tmp_path / "made" / "moved.tif")))
    assert (tmp_path / "made" / "moved.tif").exists() and not source.exists()
    gdal.Unlink(vsiidem(str(tmp_path / "made" / "moved.tif")))  # deferred ...
    gdal.SetFileMetadata("/vsiidem/", {}, "IDEM_FLUSH_UNLINKS")  # ... until now
    gdal.Rmdir(sub)
    assert not (tmp_path / "made").exists()


def test_vsiidem_relative_paths_follow_working_directory(tmp_path, source, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert gdal.VSIStatL("/vsiidem/src.tif").size == source.stat().st_size
    assert "src.tif" in gdal.ReadDir("/vsiidem/")
    assert "src.tif" in gdal.ReadDir("/vsiidem/.")


def test_vsiidem_open_for_write_resolves_to_temporary(tmp_path):
    final = tmp_path / "blob.bin"
    name = vsiidem(str(final))
    f = gdal.VSIFOpenL(name, "wb")
    try:
        gdal.VSIFWriteL(b"x" * 1000, 1, 1000, f)
        gdal.VSIFFlushL(f)
        assert not final.exists(), "published before close"
        assert len(temp_dirs(tmp_path)) == 1
        assert gdal.VSIStatL(name).size == 1000  # Stat sees the file being written
        assert "blob.bin" in gdal.ReadDir(vsiidem(str(tmp_path)))
        assert TEMP_PREFIX not in "".join(gdal.ReadDir(vsiidem(str(tmp_path))))
        reader = gdal.VSIFOpenL(name, "rb")  # drivers read back their own output
        assert gdal.VSIFReadL(1, 1000, reader) == b"x" * 1000
        gdal.VSIFCloseL(reader)
    finally:
        gdal.VSIFCloseL(f)
    assert final.read_bytes() == b"x" * 1000
    assert temp_dirs(tmp_path) == []


def test_vsiidem_update_modifies_a_copy_until_close(tmp_path):
    final = tmp_path / "data.bin"
    final.write_bytes(b"0123456789")
    os.chmod(final, 0o640)
    f = gdal.VSIFOpenL(vsiidem(str(final)), "r+b")
    gdal.VSIFSeekL(f, 2, 0)
    gdal.VSIFWriteL(b"ab", 1, 2, f)
    gdal.VSIFFlushL(f)
    assert final.read_bytes() == b"0123456789", "updated in place"
    gdal.VSIFCloseL(f)
    assert final.read_bytes() == b"01ab456789"
    assert (final.stat().st_mode & 0o777) == 0o640
    assert temp_dirs(tmp_path) == []


def test_vsiidem_update_open_without_writes_leaves_file_untouched(tmp_path, source):
    # gdalwarp -overwrite opens an existing output in update mode before deleting it: that must
    # neither republish it (new inode and mtime) nor copy it.
    out = tmp_path / "kept.tif"
    run(["gdal_translate", "-of", "GTiff", source, vsiidem(str(out))])
    before = (out.stat().st_ino, out.stat().st_mtime_ns, out.read_bytes())
    f = gdal.VSIFOpenL(vsiidem(str(out)), "r+b")
    assert gdal.VSIFReadL(1, 4, f) == before[2][:4]
    assert temp_dirs(tmp_path) == [], "copied before any write"
    gdal.VSIFCloseL(f)
    ds = gdal.Open(vsiidem(str(out)), gdal.GA_Update)
    assert ds.RasterCount == gdal.Open(str(source)).RasterCount
    ds = None
    assert (out.stat().st_ino, out.stat().st_mtime_ns, out.read_bytes()) == before
    assert temp_dirs(tmp_path) == []
    # The first write still goes to a copy, from the offset reached by reading.
    f = gdal.VSIFOpenL(vsiidem(str(out)), "r+b")
    gdal.VSIFSeekL(f, 0, 2)
    gdal.VSIFWriteL(b"tail", 1, 4, f)
    assert out.read_bytes() == before[2], "updated in place"
    gdal.VSIFCloseL(f)
    assert out.read_bytes() == before[2] + b"tail"
    assert out.stat().st_ino != before[0]


def test_vsiidem_gdaladdo_internal_and_external_overviews(tmp_path, source):
    out = tmp_path / "ovr.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", source, vsiidem(out)])
    run(["gdaladdo", "-q", vsiidem(out), "2", "4"])
    assert gdal.Open(str(out)).GetRasterBand(1).GetOverviewCount() == 2
    external = tmp_path / "external.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", source, vsiidem(external)])
    run(["gdaladdo", "-q", "-ro", vsiidem(external), "2", "4"])
    assert (tmp_path / "external.tif.ovr").exists()
    assert gdal.Open(str(external)).GetRasterBand(1).GetOverviewCount() == 2
    assert temp_dirs(tmp_path) == []


def test_vsiidem_copy_src_overviews(tmp_path, source):
    with_ovr = tmp_path / "with_ovr.tif"
    with_ovr.write_bytes(source.read_bytes())
    ds = gdal.Open(str(with_ovr), gdal.GA_Update)
    ds.BuildOverviews("AVERAGE", [2, 4])
    ds = None
    out = tmp_path / "copied.tif"
    run(["gdal_translate", "-q", "-of", "GTiff", "-co", "COPY_SRC_OVERVIEWS=YES",
         "-co", "TILED=YES", with_ovr, vsiidem(out)])
    ds = gdal.Open(str(out))
    assert ds.GetRasterBand(1).GetOverviewCount() == 2
    assert ds.GetRasterBand(1).Checksum() == gdal.Open(str(source)).GetRasterBand(1).Checksum()
    assert temp_dirs(tmp_path) == []


def test_vsiidem_cog_output(tmp_path, source):
    out = tmp_path / "cog.tif"
    run(["gdal_translate", "-q", "-of", "COG", "-co", "COMPRESS=DEFLATE", source, vsiidem(out)])
    assert gdal.Open(str(out)).GetMetadataItem("LAYOUT", "IMAGE_STRUCTURE") == "COG"
    assert temp_dirs(tmp_path) == []


def test_vsiidem_gdalwarp_overwrite(tmp_path, source):
    ds = gdal.Open(str(source), gdal.GA_Update)
    ds.SetProjection('EPSG:32633')
    ds = None
    out = tmp_path / "warped.tif"
    for _ in range(2):
        run(["gdalwarp", "-q", "-overwrite", "-t_srs", "EPSG:3857", "-of", "GTiff",
             "-co", "TILED=YES", source, vsiidem(out)])
        assert out.exists()
    assert temp_dirs(tmp_path) == []


def test_vsiidem_rasterio_write(tmp_path):
    rasterio = pytest.importorskip("rasterio")
    out = tmp_path / "rio.tif"
    data = np.arange(64 * 48, dtype=np.uint16).reshape(1, 48, 64)
    code = f"""
        import numpy as np, rasterio
        from rasterio.transform import from_origin
        data = np.arange(64 * 48, dtype=np.uint16).reshape(1, 48, 64)
        with rasterio.open({vsiidem(str(out))!r}, "w", driver="GTiff", width=64, height=48,
                           count=1, dtype="uint16", crs="EPSG:3857",
                           transform=from_origin(0, 0, 1, 1)) as dst:
            dst.write(data)
        with rasterio.open({vsiidem(str(out))!r}) as src:
            assert (src.read() == data).all()
    """
    run_python(code)
    with rasterio.open(str(out)) as src:
        assert (src.read() == data).all()
    assert temp_dirs(tmp_path) == []


def _source_with_a_corrupt_tile(path):
    """A tiled, compressed GeoTIFF whose tile (2, 2) does not decompress: reading it fails."""
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 256, 256, 1, gdal.GDT_Byte,
                                              ["TILED=YES", "BLOCKXSIZE=64", "BLOCKYSIZE=64",
                                               "COMPRESS=DEFLATE"])
    ds.GetRasterBand(1).WriteArray((np.arange(256 * 256) % 251).reshape(256, 256)
                                   .astype(np.uint8))
    ds = None
    ds = gdal.Open(str(path))
    offset = int(ds.GetRasterBand(1).GetMetadataItem("BLOCK_OFFSET_2_2", "TIFF"))
    ds = None
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff" * 40)
    return str(path)


@pytest.mark.skipif(not gdal_at_least("3.12"),
                    reason="drivers tell a file system that they gave up on a file from GDAL 3.12 "
                           "(CancelCreation); before, a driver that closes a failed file publishes "
                           "it, as plain GDAL leaves it (docs/vsiidem.md)")
def test_a_write_the_driver_gives_up_is_never_published(tmp_path):
    source = _source_with_a_corrupt_tile(tmp_path / "src.tif")
    out = tmp_path / "out.png"
    proc = subprocess.run(["gdal_translate", "-q", "-of", "PNG", source, vsiidem(str(out))],
                          env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert not out.exists()
    assert temp_dirs(str(tmp_path)) == []
