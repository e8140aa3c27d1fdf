# SPDX-License-Identifier: MIT
"""Handles, not names (docs/concepts.md): IDEM's commands and workers run as root over
directories other users can write, so every file is known by its handle, never by a name looked
up twice. Each case of the review that found names trusted has its test here, and the rule is
attacked with generated cases:

- a race generator: at every pause point of a worker, a directory on the output's path, the
  ledger's directory or CPL_TMPDIR (each owned by `nobody`) is swapped for a link to a directory
  of root's; nothing outside IDEM's own files may change (a hash of the whole tree, owners and
  modes included), and no file IDEM published carries a special mode bit;
- a matrix of permission bits (set-user-ID, set-group-ID, sticky, another owner's file) for every
  path that writes over a file: the driver, a plain driver through /vsiidem/, the update copy,
  the export.

Workers stop at pause points and go on when the test creates their resume file."""

import hashlib
import json
import os
import random
import shutil
import sqlite3
import stat
import subprocess

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, PausedWorker, env_with, make_source, run, share_keeps)

NOBODY = 65534
IDEM_NAMES = ("x.tif", "x.tif.aux.xml", "x.img", "x.hdr", "x.img.aux.xml")

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="acting as another user's neighbour needs root")


def full_state(root, skip=lambda rel: False):
    """Every name under `root` (links not followed): kind, owner, group, mode, and the bytes'
    hash or the link's target."""
    state = {}
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            if skip(rel):
                continue
            info = os.lstat(path)
            common = (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode))
            if stat.S_ISLNK(info.st_mode):
                state[rel] = ("link", os.readlink(path)) + common
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    state[rel] = ("file", hashlib.sha256(f.read()).hexdigest()) + common
            elif stat.S_ISDIR(info.st_mode):
                state[rel] = ("dir",) + common
            else:
                state[rel] = ("special", stat.S_IFMT(info.st_mode)) + common
    return state


def is_idem_name(rel):
    """IDEM's own names: the output and its sidecars, attempt directories, the ledger's files."""
    parts = rel.split(os.sep)
    return (parts[-1] in IDEM_NAMES or any(p.startswith(".idem-tmp-") for p in parts) or
            parts[-1].startswith("ledger.sqlite"))


def special_bits_under(root):
    """Files under `root` with a mode bit beyond 0777."""
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names
            if os.lstat(os.path.join(d, n)).st_mode & 0o7000]


def chown_tree(root, uid):
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(directory, name), uid, uid)
    os.lchown(root, uid, uid)


def swap_for_link(path, target):
    """`nobody`'s move: the directory at `path` goes aside, a link of theirs to `target` takes
    its name. Returns how to put it back."""
    aside = str(path) + ".aside"
    os.rename(path, aside)
    os.symlink(target, path)
    os.lchown(path, NOBODY, NOBODY)

    def undo():
        os.unlink(path)
        os.rename(aside, path)
    return undo


def make_victim(root):
    """Root's files where a link may lead, named as what a worker would write there through any
    swapped component: the output (x.tif, and out/x.tif for a link in place of its parent), the
    ledger's companions."""
    victim = root / "victim"
    (victim / "out").mkdir(parents=True)
    for name in ("x.tif", "out/x.tif", "out/x.tif.aux.xml", "ledger.sqlite-wal",
                 "ledger.sqlite-shm", "precious"):
        (victim / name).write_bytes(os.urandom(64))
        os.chmod(victim / name, 0o600)
    return victim


# --- the race generator ---------------------------------------------------------------------------

DRIVER_POINTS = ["before_claim", "during_write", "before_confirm", "before_commit",
                 "during_publish", "before_complete", "after_complete"]
VSIIDEM_POINTS = ["vsiidem_create", "vsiidem_publish"]
SWAPS = ["shared", "shared/out", "ledgerdir", "tmp"]


def race_cases():
    """Every pause point with each component swapped (CI), then IDEM_TEST_RACES more (bench/
    invariants.sh): a random point with one or two components swapped at once, drawn from the
    seed IDEM_TEST_SEED."""
    cases = [(point, (swap,)) for point in DRIVER_POINTS + VSIIDEM_POINTS for swap in SWAPS]
    rng = random.Random(int(os.environ.get("IDEM_TEST_SEED", "61")))
    for _ in range(int(os.environ.get("IDEM_TEST_RACES", "0"))):
        point = rng.choice(DRIVER_POINTS + VSIIDEM_POINTS)
        first = rng.choice(SWAPS)
        second = rng.choice([None] + [swap for swap in SWAPS if swap != first])
        cases.append((point, tuple(swap for swap in (first, second) if swap is not None)))
    return cases


@pytest.mark.parametrize("point,swaps", race_cases())
def test_a_directory_swapped_for_a_link_at_any_pause_changes_nothing_outside(tmp_path, point,
                                                                             swaps):
    """Root's worker writes into directories `nobody` owns; at `point` nobody swaps each of
    `swaps` for a link to root's directory. Whatever the worker then does (publish, fail,
    complete), the link's target is untouched, nothing else outside IDEM's own names changed,
    and nothing published carries a special bit."""
    world = tmp_path / "world"
    (world / "shared" / "out").mkdir(parents=True)
    (world / "ledgerdir").mkdir()
    (world / "tmp").mkdir()
    src = make_source(world / "src.tif", size=64)
    chown_tree(world / "shared", NOBODY)
    chown_tree(world / "ledgerdir", NOBODY)
    chown_tree(world / "tmp", NOBODY)
    victim = make_victim(tmp_path)
    dsn = f"sqlite:{world}/ledgerdir/ledger.sqlite"
    run([GDAL_IDEM, "--ledger", dsn, "-q", "init"], check=True)
    env = env_with(IDEM_LEDGER=dsn, CPL_TMPDIR=world / "tmp")
    out = world / "shared" / "out" / "x.tif"
    if point in VSIIDEM_POINTS:
        cmd = ["gdal_translate", "-q", "-of", "GTiff", src, f"/vsiidem/{out}"]
    else:
        cmd = ["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{out}"]
    victim_before = full_state(victim)
    world_before = full_state(world, skip=is_idem_name)
    worker = PausedWorker(cmd, env, point, tmp_path)
    # The deepest first, so that a swapped parent still holds the child to swap.
    undos = [swap_for_link(world / swap, victim) for swap in sorted(swaps, key=len, reverse=True)]
    try:
        worker.resume()
    finally:
        worker.kill()
        for undo in reversed(undos):
            undo()
    assert full_state(victim) == victim_before
    assert full_state(world, skip=is_idem_name) == world_before
    assert special_bits_under(world) == []


# --- 1: permission bits ---------------------------------------------------------------------------

def writers(tmp_path, src, ledger_dsn):
    """Each path that writes over an existing file at `target`: a command for it."""
    def driver(target):
        return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=ENVI", src,
                f"/vsiidem/{target}"]

    def plain(target):
        return ["gdal_translate", "-q", "-of", "ENVI", src, f"/vsiidem/{target}"]

    def update(target):
        code = ("import sys\nfrom osgeo import gdal\nf = gdal.VSIFOpenL(sys.argv[1], 'r+b')\n"
                "gdal.VSIFSeekL(f, 0, 0)\ngdal.VSIFWriteL(b'new bytes', 1, 9, f)\n"
                "sys.exit(gdal.VSIFCloseL(f))\n")
        return ["/usr/bin/python3", "-c", code, f"/vsiidem/{target}"]

    def export(target):
        return [GDAL_IDEM, "--ledger", ledger_dsn, "-q", "export", str(target)]
    return {"driver": (driver, "x.img"), "plain": (plain, "x.img"),
            "update": (update, "x.img"), "export": (export, "x.gpkg")}


@pytest.mark.parametrize("mode", share_keeps([0o4755, 0o2755, 0o1755, 0o6777, 0o755, 0o600],
                                             [0o4755, 0o600]))
@pytest.mark.parametrize("owner", ["root", "nobody"])
@pytest.mark.parametrize("writer", ["driver", "plain", "update", "export"])
def test_a_file_written_over_another_never_takes_its_special_bits(tmp_path, mode, owner,
                                                                  writer):
    """A user leaves a file with mode `mode` where root's job writes: root's new file never
    carries set-user-ID, set-group-ID, sticky or execute bits, nor the user's ownership. A new
    file (the driver's, the export's) has the umask's bits; a plain driver writing over the file
    (which GDAL does not take for a dataset, so does not delete first) and an update in place
    keep its read and write bits, only when root owned it."""
    src = make_source(tmp_path / "src.tif", size=16, bands=1)
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"
    run([GDAL_IDEM, "--ledger", dsn, "-q", "init"], check=True)
    command, name = writers(tmp_path, src, dsn)[writer]
    out = tmp_path / "out"
    out.mkdir()
    target = out / name
    target.write_bytes(b"\x7fELF a user's program" * 8)
    uid = 0 if owner == "root" else NOBODY
    os.chown(target, uid, uid)
    os.chmod(target, mode)
    proc = run(command(target), env=env_with(IDEM_LEDGER=dsn))
    assert proc.returncode == 0, proc.stderr
    info = os.lstat(target)
    assert info.st_mode & 0o7111 == 0, oct(info.st_mode)
    assert info.st_uid == 0
    if writer in ("plain", "update") and owner == "root":
        assert stat.S_IMODE(info.st_mode) == mode & 0o666
    else:
        assert stat.S_IMODE(info.st_mode) == 0o666 & ~current_umask()
    assert special_bits_under(out) == []


def current_umask():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


# --- 4: the output is the archive a source is read from -------------------------------------------

def archives(tmp_path, src):
    d = tmp_path
    subprocess.run(["zip", "-q", "-j", str(d / "scenes.zip"), src], check=True)
    subprocess.run(["tar", "-C", str(d), "-cf", str(d / "scenes.tar"), "src.tif"], check=True)
    with open(src, "rb") as f, open(d / "src.tif.gz", "wb") as g:
        subprocess.run(["gzip", "-c"], stdin=f, stdout=g, check=True)
    size = os.path.getsize(src)
    return [(f"/vsizip/{d}/scenes.zip/src.tif", d / "scenes.zip"),
            (f"/vsizip/{{{d}/scenes.zip}}/src.tif", d / "scenes.zip"),
            (f"/vsitar/{d}/scenes.tar/src.tif", d / "scenes.tar"),
            (f"/vsigzip/{d}/src.tif.gz", d / "src.tif.gz"),
            (f"/vsisubfile/0_{size},{src}", d / "src.tif"),
            (f"/vsizip//vsiidem/{d}/scenes.zip/src.tif", d / "scenes.zip")]


@pytest.mark.parametrize("writer", ["IDEM", "GTiff"])
def test_an_archive_a_source_is_read_from_is_never_the_output(tmp_path, writer):
    """gdal_translate -of IDEM /vsizip/scenes.zip/a.tif /vsiidem/scenes.zip (and every archive
    and wrapper chain): refused, the archive byte for byte as it was."""
    if shutil.which("zip") is None:
        pytest.skip("zip is needed to make an archive")
    src = make_source(tmp_path / "src.tif", size=32)
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"

    def not_ours(rel):  # the ledger, and what GDAL's /vsigzip/ keeps beside a .gz it reads
        return rel.startswith("ledger.sqlite") or rel.endswith(".properties")
    for source, archive in archives(tmp_path, src):
        before = full_state(tmp_path, skip=not_ours)
        proc = run(["gdal_translate", "-q", "-of", writer, source, f"/vsiidem/{archive}"],
                   env=env_with(IDEM_LEDGER=dsn))
        assert proc.returncode != 0, source
        assert full_state(tmp_path, skip=not_ours) == before


# --- 5 and 6: the ledger's files, by what SQLite opened -------------------------------------------

@pytest.mark.parametrize("through", ["directory_link", "file_link", "dotdot"])
def test_the_ledgers_companions_are_known_where_sqlite_has_them(tmp_path, through):
    """IDEM_LEDGER reached through a link (or '..'): SQLite keeps -wal and -shm beside the link's
    target; an output written there, under any spelling, by the driver or a plain driver through
    /vsiidem/, is refused, and the ledger keeps its recent rows."""
    real = tmp_path / "real"
    real.mkdir()
    if through == "directory_link":
        os.symlink(real, tmp_path / "link")
        dsn = f"sqlite:{tmp_path}/link/ledger.sqlite"
    elif through == "file_link":
        os.symlink(real / "ledger.sqlite", tmp_path / "named.sqlite")
        dsn = f"sqlite:{tmp_path}/named.sqlite"
    else:
        (tmp_path / "sub").mkdir()
        dsn = f"sqlite:{tmp_path}/sub/../real/ledger.sqlite"
    src = make_source(tmp_path / "src.tif", size=16)
    env = env_with(IDEM_LEDGER=dsn)
    run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/done.tif"], env=env,
        check=True)
    for name in ("ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite",
                 "ledger.sqlite-journal"):
        for writer in ("IDEM", "GTiff"):
            before = {n: os.path.getsize(real / n) for n in os.listdir(real)}
            proc = run(["gdal_translate", "-q", "-of", writer, src, f"/vsiidem/{real}/{name}"],
                       env=env)
            assert proc.returncode != 0, (name, writer)
            if name.endswith("-journal"):
                assert not (real / name).exists() or (real / name).stat().st_size == 0
            for n, size in before.items():
                with open(real / n, "rb") as f:
                    assert f.read(4) not in (b"II*\0", b"MM\0*"), n
    proc = run([GDAL_IDEM, "--ledger", dsn, "--json", "status"])
    assert json.loads(proc.stdout)["completed"] == 1


def test_a_rename_through_vsiidem_goes_through_the_guard(tmp_path):
    """gdal.Rename through /vsiidem/ onto the ledger, its companions, a link, a FIFO or a file
    the process reads is refused, and so is renaming the ledger away; a plain rename works."""
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"
    run([GDAL_IDEM, "--ledger", dsn, "-q", "init"], check=True)
    src = make_source(tmp_path / "src.tif", size=16)
    (tmp_path / "mine.txt").write_text("mine")
    os.symlink(tmp_path / "nowhere", tmp_path / "link.tif")
    os.mkfifo(tmp_path / "fifo.tif")
    code = """import sys
from osgeo import gdal
held = gdal.Open(sys.argv[1])
results = [gdal.Rename(a, b) for a, b in zip(sys.argv[2::2], sys.argv[3::2])]
print(' '.join(str(r) for r in results))
"""
    v = f"/vsiidem/{tmp_path}"
    pairs = [(f"{v}/mine.txt", f"{v}/ledger.sqlite"),
             (f"{v}/mine.txt", f"{v}/ledger.sqlite-wal"),
             (f"{v}/mine.txt", f"{v}/link.tif"),
             (f"{v}/mine.txt", f"{v}/fifo.tif"),
             (f"{v}/mine.txt", f"{v}/src.tif"),
             (f"{v}/ledger.sqlite", f"{v}/stolen.sqlite"),
             (f"{v}/mine.txt", f"{v}/renamed.txt")]
    before = full_state(tmp_path, skip=lambda rel: rel.startswith("ledger.sqlite-"))
    proc = run(["/usr/bin/python3", "-c", code, src] + [x for pair in pairs for x in pair],
               env=env_with(IDEM_LEDGER=dsn))
    results = proc.stdout.split()
    assert results[:-1] == ["-1"] * (len(pairs) - 1), proc.stdout + proc.stderr
    assert results[-1] == "0"
    after = full_state(tmp_path, skip=lambda rel: rel.startswith("ledger.sqlite-"))
    before["renamed.txt"] = before.pop("mine.txt")
    assert after == before


# --- 7: an SQLite URI as the ledger ---------------------------------------------------------------

@pytest.mark.parametrize("dsn", ["sqlite:file:led.sqlite?immutable=1", "sqlite:file:led.sqlite",
                                 "file:led.sqlite?nolock=1", "sqlite:FILE:led.sqlite"])
def test_an_sqlite_uri_is_refused_saying_how_to_write_it(tmp_path, dsn):
    src = make_source(tmp_path / "src.tif", size=16)
    for command in ([GDAL_IDEM, "--ledger", dsn, "init"],
                    ["gdal_translate", "-q", "-of", "IDEM", src, "/vsiidem/out.tif"]):
        proc = run(command, env=env_with(IDEM_LEDGER=dsn), cwd=tmp_path)
        assert proc.returncode != 0
        assert "sqlite:/path/to/ledger.sqlite" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["src.tif"]


# --- 8: a FIFO planted where GDAL looks for a sidecar ---------------------------------------------

@pytest.mark.parametrize("name", ["x.tif.aux.xml", "x.aux.xml", "x.tif.ovr", "x_rpc.txt"])
def test_a_fifo_beside_a_completed_output_never_hangs_a_command(tmp_path, name):
    """Anyone who can create a file in an output directory plants a FIFO under a sidecar's name:
    the rerun, `verify` and `pending` look before they open, take the output as changed, and
    never open the FIFO (each bounded by a timeout that fails the test)."""
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"
    src = make_source(tmp_path / "src.tif", size=16)
    env = env_with(IDEM_LEDGER=dsn)
    out = tmp_path / "x.tif"
    cmd = ["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{out}"]
    run(cmd, env=env, check=True)
    os.mkfifo(tmp_path / name)
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(" ".join(str(c) for c in cmd) + "\n")
    proc = run([GDAL_IDEM, "--ledger", dsn, "pending", str(jobs)], env=env, timeout=60)
    assert proc.returncode == 0 and str(out) in proc.stdout, proc.stderr
    proc = run([GDAL_IDEM, "--ledger", dsn, "verify", "--dry-run"], env=env, timeout=60)
    assert proc.returncode == 1 and name in proc.stdout, proc.stdout + proc.stderr
    proc = run(cmd, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(tmp_path / name).st_mode)


# --- 9: reap and a live plain /vsiidem/ writer ----------------------------------------------------

def test_reap_leaves_a_live_plain_writers_temporary_directory(tmp_path):
    """A plain driver writing through /vsiidem/ holds no claim; its temporary directory is locked
    while it lives, so `reap --all-dirs --older-than 0s` leaves it, and the write publishes."""
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"
    src = make_source(tmp_path / "src.tif", size=16)
    env = env_with(IDEM_LEDGER=dsn)
    run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/done.tif"], env=env,
        check=True)
    out = tmp_path / "plain.tif"
    worker = PausedWorker(["gdal_translate", "-q", "-of", "GTiff", src, f"/vsiidem/{out}"], env,
                          "vsiidem_publish", tmp_path)
    try:
        temp = [n for n in os.listdir(tmp_path) if n.startswith(".idem-tmp-")]
        assert len(temp) == 1
        proc = run([GDAL_IDEM, "--ledger", dsn, "reap", "--all-dirs", "--older-than", "0s"],
                   env=env)
        assert proc.returncode in (0, 1), proc.stderr
        assert os.path.isdir(tmp_path / temp[0])
        code, err = worker.resume()
        assert code == 0, err
    finally:
        worker.kill()
    assert gdal.Open(str(out)) is not None
    assert [n for n in os.listdir(tmp_path) if n.startswith(".idem-tmp-")] == []


# --- 10: the STAC export ---------------------------------------------------------------------------

def test_the_stac_export_never_writes_over_the_ledger(tmp_path):
    """A ledger named like a file of the catalog (catalog.json) is refused by the export, which
    goes through the destination guard as every writer does."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    dsn = f"sqlite:{catalog}/catalog.json"
    src = make_source(tmp_path / "src.tif", size=16)
    run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/a.tif"],
        env=env_with(IDEM_LEDGER=dsn), check=True)
    with open(catalog / "catalog.json", "rb") as f:
        before = f.read()
    proc = run([GDAL_IDEM, "--ledger", dsn, "export", "--format", "stac", str(catalog)])
    assert proc.returncode != 0
    assert "ledger" in proc.stderr
    with open(catalog / "catalog.json", "rb") as f:
        assert f.read() == before


# --- 11: read-only commands beside a database that is not a ledger --------------------------------

@pytest.mark.parametrize("command", [["status"], ["inflight"], ["verify", "--dry-run"],
                                     ["export", "OUT.gpkg"]])
def test_a_read_only_command_creates_nothing_beside_a_database_in_wal_mode(tmp_path, command):
    """A GeoPackage in WAL mode named as the ledger by mistake: refused, and no -wal or -shm file
    is left beside it."""
    path = tmp_path / "mine.gpkg"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE features (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = sorted(os.listdir(tmp_path))
    command = [str(tmp_path / "out.gpkg") if c == "OUT.gpkg" else c for c in command]
    proc = run([GDAL_IDEM, "--ledger", f"sqlite:{path}"] + command)
    assert proc.returncode != 0
    assert "not an IDEM ledger" in proc.stderr
    assert sorted(os.listdir(tmp_path)) == before


# --- 12: dry runs write nothing beside their sources -----------------------------------------------

def test_pending_and_key_write_nothing_beside_the_sources(tmp_path):
    """A batch line with -stats (GDAL computes statistics of the source and saves them in a
    .aux.xml beside it on close): `pending` and `key` run it as a dry run, which writes nothing
    anywhere."""
    dsn = f"sqlite:{tmp_path}/ledger.sqlite"
    run([GDAL_IDEM, "--ledger", dsn, "-q", "init"], check=True)
    src = make_source(tmp_path / "src.tif", size=16)
    cmd = ["gdal_translate", "-stats", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/out.tif"]
    jobs = tmp_path / "jobs.txt"
    jobs.write_text(" ".join(cmd) + "\n")
    before = full_state(tmp_path, skip=lambda rel: rel.startswith("ledger.sqlite"))
    run([GDAL_IDEM, "--ledger", dsn, "pending", str(jobs)], check=True)
    run([GDAL_IDEM, "--ledger", dsn, "key", "--"] + cmd, check=True)
    assert full_state(tmp_path, skip=lambda rel: rel.startswith("ledger.sqlite")) == before
