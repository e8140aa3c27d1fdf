# SPDX-License-Identifier: MIT
"""The safety invariants (docs/concepts.md, "What IDEM promises about your files"), each attacked
with generated cases rather than the one case a review found:

- I1, IDEM deletes only what it made or recorded: links, special files and foreign files are
  planted wherever `reap` and `forget --delete-output` look, and a hash of the whole tree (links
  not followed) must be unchanged outside IDEM's own files;
- I2, IDEM writes only where a new regular file may be written: every spelling of the ledger's
  files, of a source, of a link and of special files is given as the output of the driver and of
  a plain driver writing through /vsiidem/; creation options that update an existing file are
  found in the running GDAL's option lists and each must be refused;
- I3, a completion records only what was read: a source rewritten while the work runs, or
  replaced under a handle the caller holds, records nothing;
- I4, a read-only command opens the ledger read-only: non-ledger files, a missing path and a
  newer schema are refused, byte for byte unchanged.

Workers stop at pause points and go on when the test creates their resume file."""

import hashlib
import itertools
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import uuid
import sys

import pytest
from osgeo import gdal, ogr

from idem_testlib import (GDAL_IDEM, PausedWorker, assert_same_pixels, env_with, file_state,
                          gdal_at_least, make_ledger, make_source, run, wait_until,
                          wait_until_leases_expired)


# The test ledger's files, which the commands under test may write (rows, WAL).
LEDGER_FILES = ("ledger.sqlite", "ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal")


def tree_state(root, skip=()):
    """Every name under `root`, links not followed: its kind, and its bytes or link target."""
    state = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if any(rel == s or rel.startswith(s + os.sep) for s in skip):
                continue
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    state[rel] = ("file", info.st_ino, info.st_mtime_ns,
                                  hashlib.sha256(f.read()).hexdigest())
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ("dir", info.st_ino)
            else:
                state[rel] = ("special", stat.S_IFMT(info.st_mode), info.st_rdev)
    return state


def make_victim(root):
    """Someone else's files, old enough for any age check."""
    victim = root / "victim"
    (victim / "deep").mkdir(parents=True)
    for name in ["precious.tif", "deep/notes.txt"]:
        (victim / name).write_bytes(os.urandom(64))
        os.utime(victim / name, (1_000_000, 1_000_000))
    os.utime(victim, (1_000_000, 1_000_000))
    return victim


def translate(src, dst, *extra, env):
    return run(["gdal_translate", "-q", "-of", "IDEM", *extra, src, dst], env=env)


# --- I1: reap -----------------------------------------------------------------------------------

def plant_reap_attacks(directory, victim):
    """Links and special files named like IDEM's temporary directories, and a real one (IDEM's
    naming, so reap's to remove) holding links to the victim's files."""
    d = directory
    os.symlink(victim, d / ".idem-tmp-linkdir")
    os.symlink(victim / "precious.tif", d / ".idem-tmp-linkfile")
    os.symlink(d / "nothing-here", d / ".idem-tmp-dangling")
    os.mkfifo(d / ".idem-tmp-fifo")
    real = d / ".idem-tmp-deadbeef"
    (real / "sub").mkdir(parents=True)
    os.symlink(victim, real / "inner")
    os.symlink(victim / "precious.tif", real / "out.tif")
    os.symlink(victim / "deep", real / "sub" / "deeper")
    (real / "out.tif.aux.xml").write_text("<PAMDataset/>")
    for path in [real / "sub", real / "out.tif.aux.xml", real]:
        os.utime(path, (1_000_000, 1_000_000), follow_symlinks=False)
    return real


def add_object_output_row(ledger, work_key):
    """A row for an object output (/vsis3/bucket/a.tif), as a worker on this machine would leave
    it: reap then looks in CPL_TMPDIR, where object outputs keep their temporary copies."""
    conn = sqlite3.connect(ledger.dsn[len("sqlite:"):])
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM ledger").fetchone())
    row.update(work_key=work_key, output_uri="/vsis3/bucket/a.tif")
    conn.execute(f"INSERT INTO ledger ({','.join(row)}) VALUES ({','.join('?' * len(row))})",
                 list(row.values()))
    conn.commit()
    conn.close()


def test_invariant_reap_deletes_only_idem_directories_never_through_links(tmp_path):
    """Beside a recorded local output and in CPL_TMPDIR (where object outputs keep their
    temporary copies), links, a dangling link and a FIFO named like IDEM's temporary
    directories are left alone; a real one is removed without following the links inside it."""
    ledger = make_ledger("sqlite", tmp_path)
    cpl_tmp = tmp_path / "cpltmp"
    out_dir = tmp_path / "out"
    cpl_tmp.mkdir()
    out_dir.mkdir()
    src = make_source(tmp_path / "src.tif", size=64)
    env = env_with(IDEM_LEDGER=ledger.dsn, CPL_TMPDIR=cpl_tmp)
    translate(src, f"/vsiidem/{out_dir}/a.tif", env=env).check_returncode()
    add_object_output_row(ledger, "f" * 64)

    victim = make_victim(tmp_path)
    reals = [plant_reap_attacks(d, victim) for d in (out_dir, cpl_tmp)]
    before = tree_state(tmp_path, skip=LEDGER_FILES)
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "reap", "--older-than", "0s",
                "--all-dirs"], env=env)
    assert proc.returncode in (0, 1), proc.stderr
    after = tree_state(tmp_path, skip=LEDGER_FILES)
    removed = {os.path.relpath(r, tmp_path) for r in reals}
    expected = {k: v for k, v in before.items()
                if not any(k == r or k.startswith(r + os.sep) for r in removed)}
    assert after == expected
    for r in reals:
        assert not os.path.lexists(r)


def test_invariant_reap_as_root_leaves_what_another_user_planted_in_a_shared_tmpdir(tmp_path):
    """The threat as it is met: an unprivileged user (nobody) plants links named like IDEM's
    temporary directories, and a real one full of links, in a world-writable sticky CPL_TMPDIR;
    root's reap (cron) runs over it. Nothing changes: reap removes only temporary directories
    of the user running it (a real directory of nobody's is nobody's, whatever its name), the
    victim's files are intact, and no link is followed."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to act as another user")
    ledger = make_ledger("sqlite", tmp_path)
    shared = tempfile.mkdtemp(prefix="idem-shared-tmp-", dir="/tmp")
    try:
        os.chmod(shared, 0o1777)
        src = make_source(tmp_path / "src.tif", size=16)
        env = env_with(IDEM_LEDGER=ledger.dsn, CPL_TMPDIR=shared)
        translate(src, f"/vsiidem/{tmp_path}/a.tif", env=env).check_returncode()
        add_object_output_row(ledger, "e" * 64)
        victim = make_victim(tmp_path)
        plant = (f"cd {shared} && ln -s {victim} .idem-tmp-linkdir && "
                 f"ln -s {victim}/precious.tif .idem-tmp-linkfile && mkfifo .idem-tmp-fifo && "
                 f"mkdir -p .idem-tmp-cafe/sub && ln -s {victim} .idem-tmp-cafe/inner && "
                 f"ln -s {victim}/deep .idem-tmp-cafe/sub/deeper && "
                 f"touch -h -d @1000000 .idem-tmp-cafe/sub .idem-tmp-cafe")
        planted = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                       "sh", "-c", plant])
        assert planted.returncode == 0, planted.stderr
        before_victim = tree_state(victim)
        before_shared = tree_state(shared)
        proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "reap", "--older-than", "0s",
                    "--all-dirs"], env=env)
        assert proc.returncode in (0, 1), proc.stderr
        assert tree_state(victim) == before_victim
        assert tree_state(shared) == before_shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# --- I1: forget --delete-output ------------------------------------------------------------------

NEIGHBOURS = ["a.tfw", "a.wld", "a.txt", "a_rpc.txt", "a.imd", "a.rpb", "a.aux.xml",
              "a.tif.msk", "a.tif.ovr", "summary.txt", "README.txt", "a.tif.xml"]


@pytest.mark.parametrize("neighbour", NEIGHBOURS)
def test_invariant_forget_deletes_only_the_recorded_files(tmp_path, neighbour):
    """forget --delete-output removes the output and the sidecars its completion recorded, and
    none of the files GDAL would list as possible sidecars of the dataset now at the path."""
    ledger = make_ledger("sqlite", tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    src = make_source(tmp_path / "src.tif", size=64)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    translate(src, f"/vsiidem/{out_dir}/a.tif", "-stats", env=env).check_returncode()
    recorded = sorted(os.listdir(out_dir))
    (out_dir / neighbour).write_bytes(b"someone else's " + neighbour.encode())
    before = tree_state(tmp_path, skip=[*LEDGER_FILES, *[f"out/{n}" for n in recorded]])
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "forget", "--output",
                str(out_dir / "a.tif"), "--delete-output"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert tree_state(tmp_path, skip=[*LEDGER_FILES, *[f"out/{n}" for n in recorded]]) == before
    assert sorted(os.listdir(out_dir)) == [neighbour]


def test_invariant_forget_keeps_a_vrt_outputs_sources(tmp_path):
    """A FORMAT=VRT output lists its source rasters among its files: they stay."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=64)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    translate(src, f"/vsiidem/{tmp_path}/out.vrt", "-co", "FORMAT=VRT",
              env=env).check_returncode()
    before = tree_state(tmp_path, skip=[*LEDGER_FILES, "out.vrt"])
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "forget", "--output",
                str(tmp_path / "out.vrt"), "--delete-output"], env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "out.vrt").exists()
    assert tree_state(tmp_path, skip=[*LEDGER_FILES, "out.vrt"]) == before


@pytest.mark.parametrize("change", ["rewritten", "link", "fifo"])
def test_invariant_forget_keeps_what_replaced_the_recorded_output(tmp_path, change):
    """What is at the output's path is no longer what the completion recorded (rewritten by
    someone, a link to someone's file, a FIFO): the row goes, the path stays as it is, and the
    command says it kept it and exits 1 (it found a problem)."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=64)
    victim = make_victim(tmp_path)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    out = tmp_path / "a.tif"
    translate(src, f"/vsiidem/{out}", env=env).check_returncode()
    if change == "rewritten":
        out.write_bytes(b"a user's own file now")
    else:
        out.unlink()
        if change == "link":
            os.symlink(victim / "precious.tif", out)
        else:
            os.mkfifo(out)
    before = tree_state(tmp_path, skip=LEDGER_FILES)
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "forget", "--output", str(out),
                "--delete-output"], env=env)
    assert proc.returncode == 1, proc.stderr
    assert "kept" in proc.stdout
    assert tree_state(tmp_path, skip=LEDGER_FILES) == before
    assert ledger.rows() == []


# --- I2: where IDEM may write ---------------------------------------------------------------------

def spellings(tmp_path, target):
    """Ways to name `target` (an absolute path under tmp_path/data) as a /vsiidem/ output, run
    from tmp_path: relative, absolute, extra slashes, through a linked directory, with '..'."""
    rel = os.path.relpath(target, tmp_path)
    alias = tmp_path / "alias"
    if not alias.exists():
        os.symlink(tmp_path / "data", alias)
    return ["/vsiidem/" + rel,
            "/vsiidem/" + str(target),
            "/vsiidem///" + str(target).lstrip("/"),
            "/vsiidem/" + str(alias / os.path.relpath(target, tmp_path / "data")),
            "/vsiidem/" + str(tmp_path / "data" / ".." / "data" /
                              os.path.relpath(target, tmp_path / "data"))]


def plant_destinations(tmp_path):
    """The things at tmp_path/data an output must never be written over, by name."""
    data = tmp_path / "data"
    data.mkdir()
    victim = make_victim(tmp_path)
    ledger_path = data / "led.sqlite"
    src = str(data / "src.tif")
    make_source(src, size=32)
    run([GDAL_IDEM, "--ledger", f"sqlite:{ledger_path}", "-q", "init"]).check_returncode()
    os.link(ledger_path, data / "hard.tif")
    os.symlink(victim / "precious.tif", data / "link.tif")
    os.symlink(data / "nothing", data / "dangling.tif")
    os.mkfifo(data / "fifo.tif")
    os.mknod(data / "null.tif", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    targets = [ledger_path, data / "led.sqlite-wal", data / "led.sqlite-shm",
               data / "led.sqlite-journal", data / "hard.tif", src,
               data / "link.tif", data / "dangling.tif", data / "fifo.tif", data / "null.tif"]
    return f"sqlite:{ledger_path}", src, targets


def test_invariant_no_output_is_written_over_what_is_not_a_replaceable_file(tmp_path):
    """Every spelling of the ledger's database and companions (a hard link included), of the
    source, of links and of special files, as the output of the IDEM driver and of a plain GTiff
    written through /vsiidem/: refused, and nothing under the directory changes."""
    dsn, src, targets = plant_destinations(tmp_path)
    env = env_with(IDEM_LEDGER=dsn)
    # A plain driver through /vsiidem/ is not told its sources: the source is refused because
    # the process has it open (test_invariant_a_plain_driver_never_writes_over_a_file_it_reads).
    cases = [(writer, spelling)
             for target in targets for spelling in spellings(tmp_path, target)
             for writer in ("IDEM", "GTiff")]
    # SQLite makes the ledger's WAL companions when a refusal comes after the ledger is opened
    # (a source is known only once the work is described): they are looked at below instead.
    companions = ("data/led.sqlite-wal", "data/led.sqlite-shm")
    before = tree_state(tmp_path, skip=companions)
    accepted = []
    for writer, spelling in cases:
        # The timeout bounds a hang on a FIFO (it fails the test).
        proc = run(["gdal_translate", "-q", "-of", writer, src, spelling], env=env, cwd=tmp_path,
                   timeout=120)
        if proc.returncode == 0:
            accepted.append((writer, spelling))
    # A delete through /vsiidem/ of what may not be written over (gdal_translate 3.11+ deletes
    # its output itself first): refused, nothing removed at the end of the process either.
    unlink = ("import sys\nfrom osgeo import gdal\n"
              "sys.exit(sum(gdal.Unlink(name) == 0 for name in sys.argv[1:]))")
    names = [spelling for target in targets if target != src
             for spelling in spellings(tmp_path, target)]
    proc = run(["/usr/bin/python3", "-c", unlink, *names], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # the number of deletes accepted
    assert accepted == []
    assert tree_state(tmp_path, skip=companions) == before
    for companion in companions:
        if os.path.exists(tmp_path / companion):
            with open(tmp_path / companion, "rb") as f:
                assert f.read(4) not in (b"II*\0", b"MM\0*")  # no TIFF written there
    proc = run([GDAL_IDEM, "--ledger", dsn, "--json", "status"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["completed"] == 0


# Programs that read `src` and write `dst` (a /vsiidem/ name of the same file, or of a hard link
# to it) with a plain driver: GDAL cannot see that /vsiidem/<path> is <path>, so only /vsiidem/
# stands between them and a source replaced by its own output.
PYTHON_HELD = """import sys
from osgeo import gdal
gdal.UseExceptions()
held = gdal.Open(sys.argv[1])
try:
    gdal.Translate(sys.argv[2], held, format="GTiff", scaleParams=[[0, 255, 255, 0]])
except RuntimeError as error:
    sys.exit(f"refused: {error}")
"""
RASTERIO_REWRITE = """import sys
import rasterio
with rasterio.open(sys.argv[1]) as src:
    profile = src.profile
    try:
        with rasterio.open(sys.argv[2], "w", **profile) as dst:
            dst.write(255 - src.read())
    except rasterio.errors.RasterioIOError as error:
        sys.exit(f"refused: {error}")
"""
SELF_WRITERS = {
    "translate_gtiff": lambda src, dst: ["gdal_translate", "-q", "-of", "GTiff", "-scale", "0",
                                         "255", "255", "0", src, dst],
    "translate_png": lambda src, dst: ["gdal_translate", "-q", "-of", "PNG", src, dst],
    "translate_cog": lambda src, dst: ["gdal_translate", "-q", "-of", "COG", src, dst],
    "warp_overwrite": lambda src, dst: ["gdalwarp", "-q", "-overwrite", "-of", "GTiff",
                                        "-t_srs", "EPSG:4326", src, dst],
    "translate_vrt": lambda src, dst: ["gdal_translate", "-q", "-of", "GTiff",
                                       src.replace("src.tif", "mosaic.vrt"), dst],
    "warp_vrt": lambda src, dst: ["gdalwarp", "-q", "-overwrite", "-of", "GTiff",
                                  src.replace("src.tif", "mosaic.vrt"), dst],
    "python_held": lambda src, dst: ["/usr/bin/python3", "-c", PYTHON_HELD, src, dst],
    "rasterio_rewrite": lambda src, dst: ["/usr/bin/python3", "-c", RASTERIO_REWRITE, src, dst],
}


def test_invariant_a_plain_driver_never_writes_over_a_file_it_reads(tmp_path):
    """Every writer above, onto every spelling of its own source (a hard link and a linked
    directory included) through /vsiidem/: the source, its .aux.xml sidecar and everything else
    under the directory stay byte for byte, and the command fails."""
    data = tmp_path / "data"
    data.mkdir()
    src = make_source(data / "src.tif", size=32, bands=1)
    gdal.Info(src, stats=True)  # a sidecar GDAL's pre-delete lists with the source
    assert (data / "src.tif.aux.xml").exists()
    os.link(src, data / "hard.tif")
    gdal.BuildVRT(str(data / "mosaic.vrt"), [src])
    targets = [data / "src.tif", data / "hard.tif"]
    cases = [(name, spelling) for name in SELF_WRITERS
             for target in targets for spelling in spellings(tmp_path, target)]
    before = tree_state(tmp_path)
    accepted = []
    for name, spelling in cases:
        proc = run(SELF_WRITERS[name](src, spelling), cwd=tmp_path)
        # gdalwarp of GDAL 3.6 does not report a failed close: the VRT's source, opened at its
        # first read, is refused only then (nothing is published, the exit status stays 0).
        if proc.returncode == 0 and (name != "warp_vrt" or gdal_at_least("3.10")):
            accepted.append((name, spelling))
        assert tree_state(tmp_path) == before, (name, spelling, proc.stderr)
    assert accepted == []


def test_a_retry_after_closing_the_source_replaces_it_whole(tmp_path):
    """The refusal lasts while the file is open: the same process, once it has closed the
    dataset, rewrites the file through /vsiidem/, and the old file's sidecar goes with it."""
    src = make_source(tmp_path / "a.tif", size=32, bands=1)
    gdal.Info(src, stats=True)
    code = """import sys
from osgeo import gdal
gdal.UseExceptions()
held = gdal.Open(sys.argv[1])
try:
    gdal.Translate(sys.argv[2], held, format="GTiff")
    sys.exit("the first write was not refused")
except RuntimeError:
    pass
copy = gdal.Translate("/vsimem/copy.tif", held)
held = None
gdal.Translate(sys.argv[2], copy, format="GTiff", scaleParams=[[0, 255, 255, 0]])
"""
    before = gdal.Open(src).ReadAsArray()
    proc = run(["/usr/bin/python3", "-c", code, src, "/vsiidem/" + src])
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists(src + ".aux.xml")  # the old statistics are not the new file's
    after = gdal.Open(src).ReadAsArray()
    assert (after == 255 - before).all()


def test_invariant_export_never_replaces_the_ledger(tmp_path):
    """`gdal-idem export` onto its own ledger (a GeoPackage-named SQLite file), however spelt."""
    data = tmp_path / "data"
    data.mkdir()
    ledger_path = data / "led.gpkg"
    dsn = f"sqlite:{ledger_path}"
    run([GDAL_IDEM, "--ledger", dsn, "-q", "init"]).check_returncode()
    names = [str(ledger_path)] + spellings(tmp_path, ledger_path)
    before = tree_state(tmp_path)
    for spelling in names:
        proc = run([GDAL_IDEM, "--ledger", dsn, "-q", "export", spelling], cwd=tmp_path)
        assert proc.returncode == 2, (spelling, proc.stderr)
        assert "ledger" in proc.stderr
    assert tree_state(tmp_path) == before


# What GDAL 3.13 says, before any driver runs, of APPEND_SUBDATASET for a driver that does not
# declare subdataset creation (IDEM).
GDAL_REFUSES_SUBDATASETS = "Subdataset creation not supported for driver IDEM"


def updating_creation_options():
    """(driver, option) of the running GDAL whose creation option adds to an existing file."""
    found = []
    for i in range(gdal.GetDriverCount()):
        driver = gdal.GetDriver(i)
        options = driver.GetMetadataItem("DMD_CREATIONOPTIONLIST") or ""
        if driver.GetMetadataItem("DCAP_RASTER") != "YES":
            continue
        for match in re.finditer(r"<Option\s+name=['\"]([^'\"]+)['\"]([^>]*)>", options):
            name, rest = match.groups()
            if "APPEND" in name.upper() or re.search(r"(to|into) an existing", rest, re.I):
                found.append((driver.ShortName, name))
    return found


def test_every_creation_option_that_updates_an_existing_file_is_refused(tmp_path):
    """Each creation option of the running GDAL that makes a driver add to an existing file
    is refused before any claim: exit non-zero, the option named, no ledger row, no file."""
    options = updating_creation_options()
    assert ("GPKG", "APPEND_SUBDATASET") in options  # the search itself works
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=32)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    for (driver, option), spelling in itertools.product(
            options, ["{o}=YES", "{o}=yes", "{d}.{o}=YES", "{lo}=ON"]):
        given = spelling.format(o=option, d=driver, lo=option.lower())
        out = tmp_path / f"out-{driver}"
        proc = translate(src, f"/vsiidem/{out}", "-co", f"FORMAT={driver}", "-co", given,
                         env=env)
        assert proc.returncode != 0, (driver, given)
        # GDAL 3.13 refuses it itself for a driver without subdatasets (IDEM) before calling it.
        assert (option.upper() in proc.stderr.upper() or
                GDAL_REFUSES_SUBDATASETS in proc.stderr), (driver, given, proc.stderr)
        assert not os.path.lexists(out)
    assert ledger.rows() == []


def test_append_subdataset_into_a_geopackage_keeps_its_layers(tmp_path):
    """The review's case: a GeoPackage with a vector layer, -co APPEND_SUBDATASET=YES. The
    direct call adds a raster table; through IDEM it is refused and the file is untouched."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=32)
    gpkg = tmp_path / "roads.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(gpkg))
    ds.CreateLayer("roads", geom_type=ogr.wkbLineString)
    ds = None
    before = tree_state(tmp_path, skip=LEDGER_FILES)
    proc = translate(src, f"/vsiidem/{gpkg}", "-co", "FORMAT=GPKG", "-co",
                     "APPEND_SUBDATASET=YES", "-co", "RASTER_TABLE=dem",
                     env=env_with(IDEM_LEDGER=ledger.dsn))
    assert proc.returncode != 0
    assert ("run this command without IDEM" in proc.stderr or
            GDAL_REFUSES_SUBDATASETS in proc.stderr)
    assert tree_state(tmp_path, skip=LEDGER_FILES) == before
    assert ogr.Open(str(gpkg)).GetLayerByName("roads") is not None


# --- I3: what was read ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["in_place", "replaced"])
def test_invariant_a_source_changed_during_the_work_records_nothing(tmp_path, how):
    """The source is rewritten in place, or replaced by rename, while the warp runs: the attempt
    fails, nothing is published or recorded; with the old file put back, the rerun writes the
    direct call's pixels (the review saw a skip onto mixed pixels)."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=256)
    saved = tmp_path / "saved.tif"
    shutil.copy2(src, saved)
    other = make_source(tmp_path / "other.tif", size=256, seed=7)
    out = tmp_path / "out.tif"
    cmd = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", src,
           f"/vsiidem/{out}"]
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    worker = PausedWorker(cmd, env, "during_write", tmp_path)
    try:
        if how == "in_place":
            with open(src, "r+b") as f, open(other, "rb") as g:
                f.write(g.read())
        else:
            os.replace(other, src)
        code, stderr = worker.resume()
    finally:
        worker.kill()
    assert code != 0
    assert "changed while the work read it" in stderr
    assert not out.exists()
    assert ledger.completed() == []
    os.replace(saved, src)
    run(cmd, env=env, check=True)
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-q", "-t_srs", "EPSG:3857", src, direct], check=True)
    assert_same_pixels(out, direct)


HELD_HANDLE = r"""
import os, sys
from osgeo import gdal
gdal.UseExceptions()
src, new, out, through = sys.argv[1:]
held = gdal.Open(src)
os.replace(new, src)
source = held if through == "handle" else gdal.BuildVRT("", [held])
try:
    gdal.Translate("/vsiidem/" + out, source, format="IDEM")
except RuntimeError as error:
    print("refused:", error)
    sys.exit(3)
"""


@pytest.mark.parametrize("through", ["handle", "vrt"])
def test_invariant_a_handle_on_a_replaced_source_is_refused(tmp_path, through):
    """A dataset opened before its file was replaced reads the old bytes; IDEM would key the
    new ones. The call is refused, nothing is recorded; a fresh handle then writes the new
    file's pixels."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=64)
    new = make_source(tmp_path / "new.tif", size=64, seed=9)
    new_copy = tmp_path / "new-copy.tif"
    shutil.copy2(new, new_copy)
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=ledger.dsn)
    proc = run(["/usr/bin/python3", "-c", HELD_HANDLE, src, new, out, through], env=env)
    assert proc.returncode == 3, proc.stderr
    assert "was replaced after this process opened it" in proc.stdout
    assert not out.exists()
    assert ledger.completed() == []
    translate(src, f"/vsiidem/{out}", env=env).check_returncode()
    assert_same_pixels(out, new_copy)


# --- I4: read-only commands --------------------------------------------------------------------

READ_ONLY_COMMANDS = [["status"], ["inflight"], ["verify", "--dry-run"],
                      ["export", "{tmp}/ledger-export.geojson"]]


def foreign_files(tmp_path):
    """Files someone may name as a ledger by mistake."""
    gpkg = tmp_path / "roads.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(gpkg))
    ds.CreateLayer("roads", geom_type=ogr.wkbLineString)
    ds = None
    layered = tmp_path / "ledger-named.gpkg"
    ds = ogr.GetDriverByName("GPKG").CreateDataSource(str(layered))
    ds.CreateLayer("ledger", geom_type=ogr.wkbPoint)
    ds = None
    tif = make_source(tmp_path / "scene.tif", size=16)
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    return [gpkg, layered, tif, empty, other]


@pytest.mark.parametrize("command", READ_ONLY_COMMANDS, ids=lambda c: c[0])
def test_invariant_read_only_commands_change_no_file(tmp_path, command):
    """Every read-only command on every file that is not a ledger, and on a path with nothing:
    refused (exit 2), and the files byte for byte as they were, no file created."""
    files = foreign_files(tmp_path)
    missing = tmp_path / "typo" / "ledgr.sqlite"
    before = tree_state(tmp_path)
    for path in files + [missing]:
        args = [a.replace("{tmp}", str(tmp_path)) for a in command]
        proc = run([GDAL_IDEM, "--ledger", f"sqlite:{path}", "-q", *args])
        assert proc.returncode == 2, (path, args, proc.stdout, proc.stderr)
        assert tree_state(tmp_path) == before, (path, args)


def test_invariant_pending_creates_no_ledger(tmp_path):
    """`gdal-idem pending` on a mistyped ledger path: every command is printed as pending (with
    the reason), and no ledger appears."""
    src = make_source(tmp_path / "src.tif", size=16)
    missing = tmp_path / "typo" / "ledgr.sqlite"
    line = f"gdal_translate -of IDEM {src} /vsiidem/{tmp_path}/out.tif\n"
    proc = subprocess.run([GDAL_IDEM, "--ledger", f"sqlite:{missing}", "pending"], input=line,
                          capture_output=True, text=True, env=env_with())
    assert proc.stdout == line
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_invariant_a_newer_schema_is_refused(tmp_path, backend):
    """A ledger migrated by a newer release: read-only commands and workers refuse it, naming
    both versions, and change nothing."""
    ledger = make_ledger(backend, tmp_path)
    run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "init"]).check_returncode()
    table = "schema_version" if backend == "sqlite" else "idem.schema_version"
    conn = ledger.connect()
    conn.cursor().execute(f"INSERT INTO {table} (version, name) VALUES (9999, '9999_future.sql')")
    conn.commit()
    conn.close()
    src = make_source(tmp_path / "src.tif", size=16)
    before = tree_state(tmp_path)
    proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "status"])
    assert proc.returncode == 2
    assert "schema version 9999" in proc.stderr and "newer than this release" in proc.stderr
    known = max(int(n[:4]) for n in os.listdir(os.path.join(
        os.path.dirname(__file__), "..", "sql", "sqlite" if backend == "sqlite" else "postgres"))
        if n[:4].isdigit())
    assert f"({known})" in proc.stderr
    worker = translate(src, f"/vsiidem/{tmp_path}/out.tif", env=env_with(IDEM_LEDGER=ledger.dsn))
    assert worker.returncode != 0
    assert "schema version 9999" in worker.stderr
    assert not (tmp_path / "out.tif").exists()
    assert tree_state(tmp_path) == before
    assert ledger.rows() == []


def test_invariant_a_read_only_command_does_not_create_a_postgresql_schema():
    """status on a PostgreSQL database without the idem schema: refused, no schema created."""
    from idem_testlib import pg_fresh_database
    import psycopg
    dsn = pg_fresh_database()
    proc = run([GDAL_IDEM, "--ledger", dsn, "status"])
    assert proc.returncode == 2
    assert "not an IDEM ledger" in proc.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('idem.ledger')").fetchone()[0] is None


def test_invariant_read_only_commands_read_postgresql_in_a_read_only_transaction(tmp_path):
    """The read-only commands against PostgreSQL run every statement inside a READ ONLY
    transaction (so the server refuses any write, and nothing is left set on a pooled session).
    The reader role's row-security policy on idem.ledger raises unless the transaction is
    read-only: each command must succeed through it, and the ledger's rows stay as they were."""
    import psycopg
    ledger = make_ledger("postgresql", tmp_path)
    src = make_source(tmp_path / "src.tif", size=16)
    out = tmp_path / "out.tif"
    translate(src, f"/vsiidem/{out}", env=env_with(IDEM_LEDGER=ledger.dsn)).check_returncode()
    role = "idem_reader_" + uuid.uuid4().hex[:8]
    with psycopg.connect(ledger.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'reader-pw'")
        conn.execute(f"GRANT USAGE ON SCHEMA idem TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA idem TO {role}")
        conn.execute("""CREATE FUNCTION public.only_read_only() RETURNS boolean LANGUAGE plpgsql
            AS $$ BEGIN
              IF current_setting('transaction_read_only') <> 'on' THEN
                RAISE EXCEPTION 'idem.ledger read outside a read-only transaction';
              END IF;
              RETURN true;
            END $$""")
        conn.execute("ALTER TABLE idem.ledger ENABLE ROW LEVEL SECURITY")
        conn.execute(f"CREATE POLICY reader ON idem.ledger FOR SELECT TO {role} "
                     "USING (public.only_read_only())")
        rows_before = conn.execute("SELECT * FROM idem.ledger ORDER BY work_key").fetchall()
        key = conn.execute("SELECT work_key FROM idem.ledger").fetchone()[0]
    reader = f"{ledger.dsn} user={role} password=reader-pw"
    line = f"gdal_translate -of IDEM {src} /vsiidem/{out}\n"
    commands = [["status"], ["inflight"], ["explain", key, key], ["verify", "--dry-run"],
                ["export", str(tmp_path / "ledger-export.geojson")]]
    for args in commands:
        proc = run([GDAL_IDEM, "--ledger", reader, "-q", *args])
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        assert "reader-pw" not in proc.stderr
    proc = subprocess.run([GDAL_IDEM, "--ledger", reader, "pending"], input=line,
                          capture_output=True, text=True, env=env_with())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", "completed work listed as pending"
    with psycopg.connect(ledger.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT * FROM idem.ledger ORDER BY work_key").fetchall() == rows_before


def test_invariant_a_worker_refuses_a_file_that_is_not_a_ledger(tmp_path):
    """A worker's IDEM_LEDGER naming someone's GeoPackage: refused before anything is written
    to it (the header is not switched to WAL, no table added)."""
    gpkg = foreign_files(tmp_path)[0]
    src = make_source(tmp_path / "src.tif", size=16)
    before = tree_state(tmp_path)
    proc = translate(src, f"/vsiidem/{tmp_path}/out.tif", env=env_with(IDEM_LEDGER=f"sqlite:{gpkg}"))
    assert proc.returncode != 0
    assert "not an IDEM ledger" in proc.stderr
    assert tree_state(tmp_path) == before


# --- I3: the output's files published as a unit ------------------------------------------------

def make_plain_source(path, size=64):
    """A source without georeferencing: a PNG of it has no .aux.xml."""
    ds = gdal.GetDriverByName("GTiff").Create(str(path), size, size, 3, gdal.GDT_Byte)
    for b in range(3):
        ds.GetRasterBand(b + 1).Fill(40 * (b + 1))
    ds = None
    return str(path)


def test_invariant_a_later_publish_leaves_no_sidecar_of_an_earlier_work(tmp_path):
    """Two works on one PNG: the first (georeferenced, so with out.png.aux.xml) publishes after
    the second's GDAL pre-delete looked; the second (no georeferencing, no sidecar) publishes
    last. The earlier work's sidecar must not stay beside the later work's pixels, where it would
    give them the other work's CRS (the review reproduced it with 4 processes x 8 rounds)."""
    ledger = make_ledger("sqlite", tmp_path)
    geo = make_source(tmp_path / "geo.tif", size=64)
    plain = make_plain_source(tmp_path / "plain.tif")
    out = tmp_path / "out.png"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")

    def cmd(src):
        return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=PNG", src, f"/vsiidem/{out}"]

    first = PausedWorker(cmd(geo), env, "before_commit", tmp_path)
    try:
        second = PausedWorker(cmd(plain), env, "before_confirm", tmp_path)
        try:
            code, stderr = first.resume()
            assert code == 0, stderr
            assert (tmp_path / "out.png.aux.xml").exists()
            code, stderr = second.resume()
            assert code == 0, stderr
        finally:
            second.kill()
    finally:
        first.kill()
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("out")) == ["out.png"]
    assert gdal.Open(str(out)).GetSpatialRef() is None
    direct = tmp_path / "direct.png"
    run(["gdal_translate", "-q", "-of", "PNG", plain, direct], check=True)
    assert_same_pixels(out, direct)
    completed = {r["work_key"]: r for r in ledger.completed()}
    assert len(completed) == 2
    live = [r for r in completed.values() if r["superseded_at"] is None]
    assert len(live) == 1
    assert live[0]["completed_at"] == max(r["completed_at"] for r in completed.values())
    # The rerun of the later work skips: its recorded files are exactly what is there.
    before = os.stat(out)
    run(cmd(plain), env=env, check=True)
    assert os.stat(out).st_mtime_ns == before.st_mtime_ns


def test_a_skip_needs_no_write_access_to_the_output_directory(tmp_path):
    """Completed work in a directory that has since become read-only (a read-only bind mount:
    root ignores permission bits) is skipped, its output untouched; new work there is refused
    before any claim, naming the directory."""
    (tmp_path / "state").mkdir()
    ledger = make_ledger("sqlite", tmp_path / "state")
    tiles = tmp_path / "tiles"
    tiles.mkdir()
    src = make_source(tmp_path / "src.tif", size=64)
    other = make_source(tmp_path / "other.tif", size=64, seed=4)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    translate(src, f"/vsiidem/{tiles}/a.tif", env=env).check_returncode()
    before = tree_state(tiles)
    rows_before = ledger.rows()
    script = (f"mount --bind {tiles} {tiles} && mount -o remount,bind,ro {tiles} && "
              f"gdal_translate -q -of IDEM {src} /vsiidem/{tiles}/a.tif && echo skipped && "
              f"{{ gdal_translate -q -of IDEM {other} /vsiidem/{tiles}/b.tif; echo new=$?; }}")
    proc = run(["unshare", "-m", "sh", "-c", script], env=env)
    if "cannot change root filesystem propagation" in proc.stderr:
        # In a chroot (scripts/debian-chroot) / is no mount point, and its mount namespace is
        # private already.
        proc = run(["unshare", "-m", "--propagation", "unchanged", "sh", "-c", script], env=env)
    assert "skipped" in proc.stdout, proc.stderr
    assert "new=1" in proc.stdout
    assert "is not writable" in proc.stderr
    assert tree_state(tiles) == before
    assert ledger.rows() == rows_before


def test_invariant_a_takeover_keeps_the_output_an_abandoned_publish_replaced(tmp_path):
    """Worker Z (work K2) has exchanged its file over K1's completed output and is stopped before
    its completion; its lease runs out and W (K2 too) takes over, then dies. The takeover used
    to remove Z's temporary directory with K1's file in it: the path was left with K2's
    never-completed pixels and K1's output was gone. Now K1's output is back in place and its
    rerun skips."""
    ledger = make_ledger("sqlite", tmp_path)
    src = make_source(tmp_path / "src.tif", size=256)
    out = tmp_path / "out.tif"

    def warp(resampling):
        return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-r",
                resampling, src, f"/vsiidem/{out}"]

    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")
    run(warp("bilinear"), env=env, check=True)  # K1, completed
    k1 = file_state(out)
    zombie = PausedWorker(warp("near"), dict(env, IDEM_STALE_SECONDS="2"), "before_complete",
                          tmp_path)
    try:
        assert file_state(out) != k1  # Z's file is in place
        wait_until_leases_expired(ledger)
        taker = PausedWorker(warp("near"), env, "during_write", tmp_path)
        try:
            code, stderr = zombie.resume()
            assert code != 0
        finally:
            taker.kill()
    finally:
        zombie.kill()
    assert file_state(out) == k1
    run(warp("bilinear"), env=env, check=True)
    assert file_state(out) == k1  # skipped: the completion still matches its file


@pytest.mark.parametrize("after", ["reap", "takeover"])
def test_invariant_a_worker_killed_between_sidecar_and_primary_leaves_a_whole_output(tmp_path,
                                                                                     after):
    """K2's publish has put its sidecar over K1's completed PNG (and moved K1's other recorded
    sidecars aside) and is killed before its primary is placed: K1's pixels are then shown with
    K2's CRS. `reap` puts K1's recorded files back before it removes the dead worker's temporary
    directory (and K1's rerun skips); a takeover of K2 restores them, then publishes K2 whole."""
    ledger = make_ledger("sqlite", tmp_path)
    first = make_source(tmp_path / "first.tif", size=64)
    second = make_source(tmp_path / "second.tif", size=64, seed=7, epsg=3857)
    out = tmp_path / "out.png"
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO")

    def cmd(src):
        return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=PNG", src, f"/vsiidem/{out}"]

    def published():
        return {name: info for name, info in tree_state(tmp_path).items()
                if name.startswith("out.")}

    run(cmd(first), env=env, check=True)
    k1 = published()
    assert "out.png.aux.xml" in k1
    zombie = PausedWorker(cmd(second), dict(env, IDEM_STALE_SECONDS="2"), "during_publish",
                          tmp_path)
    zombie.kill()
    assert published() != k1  # K2's sidecar beside K1's pixels
    wait_until_leases_expired(ledger)
    if after == "reap":
        proc = run([GDAL_IDEM, "--ledger", ledger.dsn, "-q", "reap", "--older-than", "0s"],
                   env=env)
        assert proc.returncode == 1, proc.stderr  # 1: it released a claim and removed a directory
        assert published() == k1
        assert not [n for n in os.listdir(tmp_path) if n.startswith(".idem-tmp-")]
        run(cmd(first), env=env, check=True)
        assert published() == k1  # skipped: K1's completion matches its files
    else:
        run(cmd(second), env=env, check=True)
        assert_completed_output_is_whole(ledger, out, after)
        assert gdal.Open(str(out)).GetSpatialRef().GetAuthorityCode(None) == "3857"
        assert len([r for r in ledger.completed() if r["superseded_at"] is None]) == 1


def start_worker(cmd, env, point, tmp_path):
    """A worker that pauses at `point` (None: runs through). Returns (process, resume file,
    reached): a worker that ended before its pause point (refused, busy) is not waited for."""
    resume = tmp_path / f"resume-{os.urandom(6).hex()}"
    reached = tmp_path / f"reached-{os.urandom(6).hex()}"
    if point is not None:
        env = dict(env, IDEM_TEST_PAUSE_AT=point, IDEM_TEST_PAUSE_SECONDS="600",
                   IDEM_TEST_REACHED_FILE=str(reached), IDEM_TEST_RESUME_FILE=str(resume))
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    if point is None:
        proc.wait(timeout=300)
        return proc, resume, False
    wait_until(lambda: reached.exists() or proc.poll() is not None, f"a worker at {point}")
    return proc, resume, reached.exists()


def assert_completed_output_is_whole(ledger, out, round_number):
    """When the file at `out` is one a completion recorded, the files beside it named after it
    are exactly that completion's recorded members: none of another work's."""
    if not out.exists():
        return
    info = os.stat(out)
    for row in ledger.completed():
        if row["output_size"] == info.st_size and row["output_mtime_ns"] == info.st_mtime_ns:
            recorded = sorted(os.path.basename(m["path"])
                              for m in json.loads(row["output_members"] or "[]"))
            beside = sorted(n for n in os.listdir(out.parent)
                            if n.startswith(out.name + ".") or n.startswith(out.stem + ".aux"))
            assert beside == recorded, (round_number, row["work_key"][:12], beside, recorded)
            return


def test_invariant_random_schedules_on_one_destination(tmp_path):
    """Seeded random schedules of workers on three keys writing one PNG (two with a sidecar,
    one without), each stopped at a random pause point, then resumed or killed in a random
    order, with a key's source rewritten meanwhile now and then. After each round every key is
    run again, in a random order: each run must leave that work's own pixels, CRS and files at
    the path (a wrong skip would serve another work's), and the files its completion recorded,
    no more. IDEM_TEST_SEED and IDEM_TEST_ROUNDS choose the schedules (bench/ runs more)."""
    import random
    rng = random.Random(int(os.environ.get("IDEM_TEST_SEED", "44")))
    rounds = int(os.environ.get("IDEM_TEST_ROUNDS", "6"))
    ledger = make_ledger("sqlite", tmp_path)
    geo = make_source(tmp_path / "geo.tif", size=128)
    plain = make_plain_source(tmp_path / "plain.tif", size=128)
    out = tmp_path / "out.png"
    works = {"geo": [geo], "geo_half": ["-outsize", "50%", "50%", geo], "plain": [plain]}
    direct = {}
    for name, args in works.items():
        direct[name] = tmp_path / f"direct-{name}.png"
        run(["gdal_translate", "-q", "-of", "PNG", *args, direct[name]], check=True)

    def cmd(name):
        return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=PNG", *works[name],
                f"/vsiidem/{out}"]

    originals = {p: open(p, "rb").read() for p in (geo, plain)}
    # FAIL: a worker on a key another paused worker holds does not wait for it; one that reaches
    # its publish behind an earlier live claim of other work fails there (before_confirm comes
    # before that wait, so a later work can still publish after an earlier one).
    env = env_with(IDEM_LEDGER=ledger.dsn, IDEM_FSYNC="NO", IDEM_ON_BUSY="FAIL")
    points = ["during_write", "before_confirm", "before_confirm", "before_commit",
              "before_complete", None]
    for round_number in range(rounds):
        # Distinct keys: two workers on one key would only find each other busy.
        workers = [start_worker(cmd(name), env, rng.choice(points), tmp_path)
                   for name in rng.sample(list(works), rng.randint(2, 3))]
        paused = [(proc, resume) for proc, resume, reached in workers if reached]
        rng.shuffle(paused)
        for proc, resume in paused:
            if rng.random() < 0.3:  # a source rewritten under the paused work
                victim = rng.choice(list(originals))
                with open(victim, "r+b") as f:
                    f.seek(len(originals[victim]) // 2)
                    f.write(os.urandom(64))
            if rng.random() < 0.5:
                resume.write_text("go")
            else:
                proc.kill()
            proc.wait(timeout=300)
        assert_completed_output_is_whole(ledger, out, round_number)
        for path, data in originals.items():
            with open(path, "wb") as f:
                f.write(data)
        ledger.end_leases()  # killed workers' claims, as if their leases had run out
        for name in rng.sample(list(works), len(works)):
            proc = run(cmd(name), env=dict(env, IDEM_ON_BUSY="WAIT"))
            assert proc.returncode == 0, (round_number, name, proc.stderr)
            assert_same_pixels(out, direct[name])
            expected_crs = gdal.Open(str(direct[name])).GetSpatialRef()
            got_crs = gdal.Open(str(out)).GetSpatialRef()
            assert (got_crs is None) == (expected_crs is None), (round_number, name)
            # The files at the path are the direct call's files, by name.
            files = sorted(n for n in os.listdir(tmp_path) if n.startswith("out."))
            wanted = sorted("out.png" + n[len(f"direct-{name}.png"):]
                            for n in os.listdir(tmp_path) if n.startswith(f"direct-{name}.png"))
            assert files == wanted, (round_number, name)


# --- the review's low findings ---------------------------------------------------------------------

@pytest.mark.parametrize("container", ["zip", "gzip"])
def test_a_deflated_source_in_an_archive_is_read(tmp_path, container):
    """A source deflated in a .zip or a .gz (docs/keys.md lists /vsizip/ and /vsigzip/): keyed
    by its bytes, written with the direct call's pixels, skipped on a rerun, rebuilt when the
    archived file changes."""
    import gzip
    import zipfile
    ledger = make_ledger("sqlite", tmp_path)
    env = env_with(IDEM_LEDGER=ledger.dsn)
    out = tmp_path / "out.tif"

    def pack(seed):
        make_source(tmp_path / "a.tif", size=64, seed=seed)
        if container == "zip":
            with zipfile.ZipFile(tmp_path / "a.zip", "w", zipfile.ZIP_DEFLATED) as z:
                z.write(tmp_path / "a.tif", "a.tif")
            return f"/vsizip/{tmp_path}/a.zip/a.tif"
        with open(tmp_path / "a.tif", "rb") as f, gzip.open(tmp_path / "a.tif.gz", "wb") as g:
            g.write(f.read())
        return f"/vsigzip/{tmp_path}/a.tif.gz"

    src = pack(1)
    proc = translate(src, f"/vsiidem/{out}", env=env)
    assert proc.returncode == 0, proc.stderr
    assert_same_pixels(out, tmp_path / "a.tif")
    before = file_state(out)
    translate(src, f"/vsiidem/{out}", env=env).check_returncode()
    assert file_state(out) == before
    src = pack(2)
    translate(src, f"/vsiidem/{out}", env=env).check_returncode()
    assert_same_pixels(out, tmp_path / "a.tif")
    assert len(ledger.completed()) == 2
