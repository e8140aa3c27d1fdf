# SPDX-License-Identifier: MIT
"""Outputs and sources on object storage (/vsis3/) through /vsiidem/, against a real
S3-compatible server on loopback (s3rver): first run, skip without PUT or DELETE, kill -9 during
the upload, a zombie's late upload, workers racing on one key through PostgreSQL, an object
overwritten out of band, the re-upload edge case of source ETags, verify / forget / reap."""

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.parse
import uuid

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, env_with, make_ledger, make_source, read_pixels, run,
                          share_keeps, sqlite_ledger, ledger, warp_cmd)  # noqa: F401
from faultproxy import FaultProxy, unused_port
from s3server import S3Server
from idem_testlib import gdal_at_least, gdal_config, kill9, start_paused

BUCKET = "idem-test"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = S3Server(tmp_path_factory.mktemp("s3rver"), buckets=[BUCKET]).start()
    previous = {k: gdal.GetConfigOption(k) for k in server.config()}
    for key, value in server.config().items():
        gdal.SetConfigOption(key, value)
    yield server
    for key, value in previous.items():
        gdal.SetConfigOption(key, value)
    server.stop()


@pytest.fixture
def prefix():
    return f"{BUCKET}/{uuid.uuid4().hex[:10]}"


@pytest.fixture
def source(tmp_path):
    return make_source(tmp_path / "scene.tif", size=256)


@pytest.fixture
def local_tmp(tmp_path):
    path = tmp_path / "cpl_tmpdir"
    path.mkdir()
    return path


def s3_env(s3, ledger, local_tmp, **extra):
    return env_with(IDEM_LEDGER=ledger.dsn, CPL_TMPDIR=local_tmp, **s3.config(), **extra)


def etag_of(uri):
    gdal.VSICurlClearCache()
    headers = gdal.GetFileMetadata(uri, "HEADERS") or {}
    return headers.get("ETag")


def recorded_etag_of(uri):
    """What the driver records for an object it uploaded in one PUT: the MD5 of its bytes, which
    is the ETag S3 (and s3rver) gives it, marked as predicted."""
    gdal.VSICurlClearCache()
    handle = gdal.VSIFOpenL(uri, "rb")
    try:
        gdal.VSIFSeekL(handle, 0, 2)
        size = gdal.VSIFTellL(handle)
        gdal.VSIFSeekL(handle, 0, 0)
        data = gdal.VSIFReadL(1, size, handle)
    finally:
        gdal.VSIFCloseL(handle)
    return "md5:" + hashlib.md5(data).hexdigest()


def object_exists(uri):
    gdal.VSICurlClearCache()
    return gdal.VSIStatL(uri) is not None


def direct_warp(src, tmp_path, *extra):
    out = tmp_path / f"direct-{uuid.uuid4().hex[:6]}.tif"
    run(["gdalwarp", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear", *extra, src, out],
        check=True)
    return out


def temp_dirs(local_tmp):
    return [n for n in os.listdir(local_tmp) if n.startswith(".idem-tmp-")]


ENTRY_POINTS = {
    "gdalwarp": lambda src, dst: warp_cmd(src, dst),
    "gdal_translate": lambda src, dst: ["gdal_translate", "-of", "IDEM", "-co", "COMPRESS=DEFLATE",
                                        src, dst],
    "gdal.Warp": lambda src, dst: [
        "/usr/bin/python3", "-c",
        "import sys; from osgeo import gdal; gdal.UseExceptions(); "
        "ds = gdal.Warp(sys.argv[2], sys.argv[1], format='IDEM', dstSRS='EPSG:3857', "
        "resampleAlg='bilinear'); assert ds is not None", src, dst],
    "rasterio": lambda src, dst: [
        "/usr/bin/python3", "-c",
        "import logging, sys, rasterio, rasterio.shutil\n"
        "from rasterio.vrt import WarpedVRT\n"
        "logging.basicConfig()  # rasterio logs GDAL's warnings\n"
        "with rasterio.open(sys.argv[1]) as s, WarpedVRT(s, crs='EPSG:3857') as v:\n"
        "    rasterio.shutil.copy(v, sys.argv[2], driver='IDEM', FORMAT='GTiff')\n", src, dst],
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_s3_first_run_publishes_then_skip_sends_no_put_or_delete(s3, sqlite_ledger, source,
                                                                 tmp_path, local_tmp, prefix,
                                                                 entry):
    uri = f"/vsis3/{prefix}/tiles/12/2200/1343.tif"
    dst = "/vsiidem//" + uri.lstrip("/")
    env = s3_env(s3, sqlite_ledger, local_tmp)
    cmd = ENTRY_POINTS[entry](source, dst)
    mark = s3.mark()
    run(cmd, env=env, check=True)
    requests = s3.requests_since(mark)
    rows = sqlite_ledger.completed()
    assert len(rows) == 1 and rows[0]["output_uri"] == uri
    # The ETag is predicted from the bytes sent, not asked of the store after the upload: the
    # PUT is the run's last request (the dataset handed back opens the object only when read).
    assert rows[0]["output_etag"] == recorded_etag_of(uri)
    assert etag_of(uri) == '"' + rows[0]["output_etag"][len("md5:"):] + '"'
    assert requests[-1][0] == "PUT" and requests[-1][1] == uri[len("/vsis3"):], requests
    assert rows[0]["output_size"] == gdal.VSIStatL(uri).size
    assert temp_dirs(local_tmp) == []
    if entry in ("gdalwarp", "gdal.Warp"):
        assert (read_pixels(uri) == read_pixels(direct_warp(source, tmp_path))).all()
    etag = etag_of(uri)

    mark = s3.mark()
    proc = run(cmd, env=env, check=True)
    assert "IDEM: skipped " + uri in proc.stderr
    assert s3.writes_since(mark) == []  # no PUT, no DELETE, no multipart POST
    assert etag_of(uri) == etag
    assert len(sqlite_ledger.rows()) == 1 and temp_dirs(local_tmp) == []


@pytest.mark.parametrize("spelling", ["/vsiidem//vsis3/", "/vsiidem///vsis3/", "/vsis3/"])
def test_s3_output_that_is_its_own_source_is_refused(s3, sqlite_ledger, source, local_tmp,
                                                     prefix, spelling):
    """An object read by the work is never written over by it, however the output is spelt."""
    uri = f"/vsis3/{prefix}/scene.tif"
    upload(source, uri, 50)
    etag = etag_of(uri)
    proc = run(["gdal_translate", "-of", "IDEM", "-scale", "0", "255", "255", "0", uri,
                spelling + uri[len("/vsis3/"):]], env=s3_env(s3, sqlite_ledger, local_tmp))
    assert proc.returncode != 0
    assert etag_of(uri) == etag
    assert sqlite_ledger.rows() == []


def test_s3_plain_writes_through_vsiidem_sidecars_first(s3, local_tmp, source, prefix):
    uri = f"/vsis3/{prefix}/plain.tif"
    mark = s3.mark()
    # No CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE: /vsiidem/ writes a local file and uploads it.
    run(["gdal_translate", "-of", "GTiff", "-co", "TFW=YES", source, "/vsiidem/" + uri],
        env=env_with(CPL_TMPDIR=local_tmp, **s3.config()), check=True)
    puts = [r[1] for r in s3.writes_since(mark) if r[0] == "PUT"]
    assert puts == [f"/{prefix}/plain.tfw", f"/{prefix}/plain.tif"]
    assert (read_pixels(uri) == read_pixels(source)).all()
    assert temp_dirs(local_tmp) == []


def test_s3_cog_is_written_from_a_local_gtiff(s3, sqlite_ledger, source, tmp_path, local_tmp,
                                              prefix):
    uri = f"/vsis3/{prefix}/cog.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp)
    run(warp_cmd(source, "/vsiidem/" + uri, "-co", "FORMAT=COG", "-co", "COMPRESS=DEFLATE"),
        env=env, check=True)
    gdal.VSICurlClearCache()
    ds = gdal.Open(uri)
    assert ds.GetMetadataItem("LAYOUT", "IMAGE_STRUCTURE") == "COG"
    assert (read_pixels(uri) == read_pixels(direct_warp(source, tmp_path))).all()
    assert temp_dirs(local_tmp) == []


@pytest.mark.parametrize("point", ["during_write", "during_upload"])
def test_s3_kill9_leaves_no_object_and_rerun_completes(s3, sqlite_ledger, source, tmp_path,
                                                       local_tmp, prefix, point):
    uri = f"/vsis3/{prefix}/killed.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp, IDEM_STALE_SECONDS=2)
    worker = start_paused(warp_cmd(source, "/vsiidem/" + uri, "-co", "TFW=YES"), env, point)
    kill9(worker)
    assert not object_exists(uri)
    rows = sqlite_ledger.rows()
    assert len(rows) == 1 and rows[0]["completed_at"] is None
    assert len(temp_dirs(local_tmp)) == 1  # the dead worker's local temporary copy
    sqlite_ledger.end_leases()
    # The reaper removes the dead attempt's claim and its local temporary directory.
    reap = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "reap", "--older-than", "0s"], env=env)
    assert reap.returncode == 1 and "removed 1 orphan" in reap.stdout, reap.stdout + reap.stderr
    assert temp_dirs(local_tmp) == []
    proc = run(warp_cmd(source, "/vsiidem/" + uri, "-co", "TFW=YES"), env=env, check=True)
    assert "skipped" not in proc.stderr
    done = sqlite_ledger.completed()
    assert len(done) == 1 and done[0]["output_etag"] == recorded_etag_of(uri)
    assert (read_pixels(uri) == read_pixels(direct_warp(source, tmp_path))).all()


def test_s3_zombie_upload_after_takeover_cannot_make_the_ledger_lie(s3, sqlite_ledger, source,
                                                                    local_tmp, prefix):
    uri = f"/vsis3/{prefix}/zombie.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp, IDEM_STALE_SECONDS=2)
    # The zombie freezes just before uploading (lease renewal stops too) past its lease...
    zombie = start_paused(warp_cmd(source, "/vsiidem/" + uri), env, "during_upload", seconds=1)
    zombie.send_signal(signal.SIGSTOP)
    try:
        sqlite_ledger.end_leases()
        # ...another worker takes the work over and completes it...
        run(warp_cmd(source, "/vsiidem/" + uri), env=env, check=True)
    finally:
        zombie.send_signal(signal.SIGCONT)
    done = sqlite_ledger.completed()
    assert len(done) == 1 and done[0]["attempt"] == 2
    # ...then the zombie wakes up, uploads, and its completion is refused.
    _, err = zombie.communicate(timeout=60)
    assert zombie.returncode != 0 and "took it over" in err, err
    done = sqlite_ledger.completed()
    assert len(done) == 1 and done[0]["attempt"] == 2
    # Whatever the zombie uploaded, the ledger's fingerprint is checked against the object.
    verify = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "verify"], env=env)
    if done[0]["output_etag"] == recorded_etag_of(uri):
        assert verify.returncode == 0, verify.stdout + verify.stderr
    else:
        assert verify.returncode == 1 and sqlite_ledger.completed() == []


def test_s3_workers_race_on_one_key_through_postgresql(s3, source, tmp_path, local_tmp, prefix):
    ledger = make_ledger("postgresql", tmp_path)
    uri = f"/vsis3/{prefix}/race.tif"
    env = s3_env(s3, ledger, local_tmp)
    mark = s3.mark()
    procs = [subprocess.Popen([str(c) for c in warp_cmd(source, "/vsiidem/" + uri)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(rc == 0 for rc, _ in results), results
    assert sum("skipped" in err for _, err in results) == 5
    rows = ledger.rows()
    assert len(rows) == 1 and rows[0]["attempt"] == 1 and rows[0]["completed_at"] is not None
    puts = [r for r in s3.writes_since(mark) if r[0] == "PUT" and r[1] == f"/{prefix}/race.tif"]
    assert len(puts) == 1
    assert rows[0]["output_etag"] == recorded_etag_of(uri)


def test_s3_object_overwritten_out_of_band_is_rebuilt(s3, sqlite_ledger, source, tmp_path,
                                                      local_tmp, prefix):
    uri = f"/vsis3/{prefix}/overwritten.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp)
    run(warp_cmd(source, "/vsiidem/" + uri), env=env, check=True)
    first = sqlite_ledger.completed()[0]
    # Someone replaces the object with other (valid, same-size-or-not) content.
    other = make_source(tmp_path / "other.tif", size=256, seed=7)
    run(["gdalwarp", "-overwrite", "-of", "GTiff", "-t_srs", "EPSG:3857", other, uri],
        env=env_with(CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE="YES", **s3.config()), check=True)
    assert recorded_etag_of(uri) != first["output_etag"]
    proc = run(warp_cmd(source, "/vsiidem/" + uri), env=env, check=True)
    assert "skipped" not in proc.stderr and "changed since this work was completed" in proc.stderr
    done = sqlite_ledger.completed()
    assert len(done) == 1 and done[0]["output_etag"] == recorded_etag_of(uri)
    assert (read_pixels(uri) == read_pixels(direct_warp(source, tmp_path))).all()


def test_s3_predicted_etag_the_store_does_not_use(s3, sqlite_ledger, tmp_path, local_tmp,
                                                  prefix):
    """Where the store's ETag is not the MD5 of the bytes (here a two-part upload; on S3 also
    SSE-KMS), the predicted ETag never makes a skip wrong: the first rerun reads the object back,
    finds the bytes recorded, skips and records the store's ETag; an overwrite is rebuilt."""
    # 6.75 MB uncompressed: two parts at a 5 MB part size, under the 8 MiB prediction bound.
    source = make_source(tmp_path / "big.tif", size=1500, bands=3)
    uri = f"/vsis3/{prefix}/two-parts.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp, VSIS3_CHUNK_SIZE="5")
    cmd = ["gdal_translate", "-of", "IDEM", source, "/vsiidem/" + uri]
    run(cmd, env=env, check=True)
    predicted = sqlite_ledger.completed()[0]["output_etag"]
    assert predicted == recorded_etag_of(uri) and etag_of(uri).endswith('-2"')
    idem = [GDAL_IDEM, "--ledger", sqlite_ledger.dsn]
    assert run(idem + ["verify"], env=env).returncode == 0  # the bytes match the prediction

    mark = s3.mark()
    proc = run(cmd, env=env, check=True)
    assert "IDEM: skipped " + uri in proc.stderr
    assert s3.writes_since(mark) == []
    assert sqlite_ledger.completed()[0]["output_etag"] == etag_of(uri)  # the store's, from now on
    store_etag = etag_of(uri)
    mark = s3.mark()
    proc = run(cmd, env=env, check=True)
    assert "IDEM: skipped " + uri in proc.stderr
    assert s3.writes_since(mark) == []
    assert sqlite_ledger.completed()[0]["output_etag"] == store_etag

    # An overwrite with other bytes (any ETag) is rebuilt, whatever was recorded.
    with sqlite3.connect(sqlite_ledger.dsn[len("sqlite:"):]) as db:
        db.execute("UPDATE ledger SET output_etag = ?", (predicted,))
    other = make_source(tmp_path / "other.tif", size=1500, bands=3, seed=7)
    upload(other, uri, 5)
    assert etag_of(uri).endswith('-2"')
    proc = run(cmd, env=env, check=True)
    assert "skipped" not in proc.stderr and "changed since this work was completed" in proc.stderr
    gdal.VSICurlClearCache()
    assert (read_pixels(uri) == read_pixels(source)).all()


def dry_run_key(src, env, policy):
    proc = run(["gdalwarp", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", src,
                "/vsiidem//tmp/never-written.tif"],
               env=dict(env, IDEM_DRY_RUN="YES", IDEM_SOURCE_DIGEST=policy), check=True)
    return proc.stderr.split("IDEM dry run: key=")[1].split()[0]


def upload(local, uri, part_size_mb):
    gdal.SetConfigOption("VSIS3_CHUNK_SIZE", str(part_size_mb))
    try:
        with open(local, "rb") as f:
            data = f.read()
        handle = gdal.VSIFOpenL(uri, "wb")
        gdal.VSIFWriteL(data, 1, len(data), handle)
        assert gdal.VSIFCloseL(handle) == 0
    finally:
        gdal.SetConfigOption("VSIS3_CHUNK_SIZE", None)


def test_s3_source_reuploaded_with_another_part_size(s3, sqlite_ledger, tmp_path, local_tmp,
                                                     prefix):
    # 6.5 MB uncompressed: one part at the default 50 MB part size, two parts at 5 MB.
    local = make_source(tmp_path / "big.tif", size=1500, bands=3)
    uri = f"/vsis3/{prefix}/sources/big.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp)
    upload(local, uri, 50)
    single_part = etag_of(uri)
    keys = {policy: dry_run_key(uri, env, policy) for policy in ("ETAG", "CONTENT", "AUTO")}
    upload(local, uri, 5)
    multipart = etag_of(uri)
    assert multipart != single_part and multipart.endswith('-2"')
    # Same bytes, new ETag: ETAG (and AUTO, which has no checksum header here) re-key and
    # rebuild; CONTENT hashes the bytes and keeps the key.
    assert dry_run_key(uri, env, "ETAG") != keys["ETAG"]
    assert dry_run_key(uri, env, "AUTO") != keys["AUTO"]
    assert dry_run_key(uri, env, "CONTENT") == keys["CONTENT"]
    # And a source on S3 warps through IDEM to S3 like any other.
    out = f"/vsis3/{prefix}/from-s3.tif"
    run(warp_cmd(uri, "/vsiidem/" + out, "-ts", "128", "128"), env=env, check=True)
    assert sqlite_ledger.completed()[0]["output_uri"] == out


def test_s3_verify_forget_on_objects(s3, sqlite_ledger, source, local_tmp, prefix):
    env = s3_env(s3, sqlite_ledger, local_tmp)
    uris = [f"/vsis3/{prefix}/v{i}.tif" for i in range(3)]
    for uri in uris:
        run(warp_cmd(source, "/vsiidem/" + uri, "-ts", "64", "64"), env=env, check=True)
    idem = [GDAL_IDEM, "--ledger", sqlite_ledger.dsn]
    assert run(idem + ["verify"], env=env).returncode == 0
    gdal.Unlink(uris[0])
    verify = run(idem + ["verify"], env=env)
    assert verify.returncode == 1 and uris[0] in verify.stdout + verify.stderr
    assert {r["output_uri"] for r in sqlite_ledger.completed()} == set(uris[1:])
    mark = s3.mark()
    run(idem + ["forget", "--output", uris[1], "--delete-output"], env=env, check=True)
    assert ("DELETE", f"/{prefix}/v1.tif", "204") in s3.requests_since(mark)
    assert not object_exists(uris[1]) and object_exists(uris[2])
    assert {r["output_uri"] for r in sqlite_ledger.completed()} == {uris[2]}


def test_s3_forget_keeps_a_rewritten_object_and_says_so(s3, sqlite_ledger, source, local_tmp,
                                                        prefix):
    """forget --delete-output removes an object only while it is the one recorded: one rewritten
    since is kept, reported, and the command exits 1 (it found a problem), not 0."""
    env = s3_env(s3, sqlite_ledger, local_tmp)
    uri = f"/vsis3/{prefix}/v.tif"
    run(warp_cmd(source, "/vsiidem/" + uri, "-ts", "64", "64"), env=env, check=True)
    with gdal_config(s3.config()):
        other = gdal.VSIFOpenL(uri, "wb")
        gdal.VSIFWriteL(os.urandom(300), 1, 300, other)
        assert gdal.VSIFCloseL(other) == 0
    mark = s3.mark()
    proc = run([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "--json", "forget", "--output", uri,
                "--delete-output"], env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (output,) = json.loads(proc.stdout)["outputs"]
    assert output["deleted"] == [] and "not the object recorded" in output["kept_because"]
    assert [r for r in s3.writes_since(mark) if r[0] == "DELETE"] == []
    assert object_exists(uri)


OUTAGES = ["503", "429", "403", "refused"]
SURFACES = ["skip", "verify", "pending", "forget"]


@pytest.mark.parametrize("outage", share_keeps(OUTAGES, kept=["503", "refused"]))
@pytest.mark.parametrize("surface", SURFACES)
def test_s3_an_output_its_store_cannot_be_asked_about_is_never_taken_for_gone(
        s3, sqlite_ledger, source, local_tmp, prefix, tmp_path, surface, outage):
    """"Could not look" is never "missing": with the store answering 503, 429 (throttled) or 403
    (credentials), or its connection refused, every place that looks at a completed object
    output (the driver's skip check, verify, pending, forget --delete-output) keeps its ledger
    row and the object, says so, and exits non-zero; once the store answers, the rerun skips."""
    env = s3_env(s3, sqlite_ledger, local_tmp)
    uri = f"/vsis3/{prefix}/v.tif"
    command = warp_cmd(source, "/vsiidem/" + uri, "-ts", "64", "64")
    run(command, env=env, check=True)
    [row] = sqlite_ledger.rows()
    assert row["completed_at"] is not None
    proxy = FaultProxy(s3.port).start()
    try:
        if outage == "refused":
            endpoint = f"127.0.0.1:{unused_port()}"
        else:
            proxy.fail(lambda method, path: True, 1000, status=int(outage))
            endpoint = f"127.0.0.1:{proxy.port}"
        down = dict(env, AWS_S3_ENDPOINT=endpoint, GDAL_HTTP_MAX_RETRY="0")
        ledger = ["--ledger", sqlite_ledger.dsn]
        if surface == "skip":
            proc = run(command, env=down)
            assert proc.returncode != 0
            assert "did not answer" in proc.stderr and "kept" in proc.stderr, proc.stderr
        elif surface == "verify":
            proc = run([GDAL_IDEM, *ledger, "--json", "verify"], env=down)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            (failure,) = json.loads(proc.stdout)["failures"]
            assert failure["row_removed"] is False
            assert "could not be looked at" in failure["problem"]
        elif surface == "pending":
            batch = tmp_path / "batch.txt"
            batch.write_text(" ".join(str(word) for word in command) + "\n")
            proc = run([GDAL_IDEM, "pending", str(batch)], env=down)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.strip() != "", "the work was taken for done"
            assert "did not answer" in proc.stderr, proc.stderr
        else:
            proc = run([GDAL_IDEM, *ledger, "--json", "forget", "--output", uri,
                        "--delete-output"], env=down)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            (output,) = json.loads(proc.stdout)["outputs"]
            assert output["deleted"] == [] and "could not be asked" in output["kept_because"]
    finally:
        proxy.stop()
    assert object_exists(uri)
    if surface != "forget":  # forget removes the row first, by design; the object stays
        assert sqlite_ledger.rows() == [row], "the completed row was lost to an outage"
        mark = s3.mark()
        run(command, env=env, check=True)
        assert [r for r in s3.writes_since(mark) if r[0] in ("PUT", "DELETE")] == []  # skipped


def test_s3_forget_racing_a_rerun_of_the_same_work_leaves_no_row_without_its_object(
        s3, sqlite_ledger, source, local_tmp, prefix):
    """forget --delete-output looks at the object, then a rerun of the same work (its row just
    forgotten) uploads the same bytes, the same ETag, and completes; forget's delete, conditional
    on that ETag, removes the rerun's object. No row may vouch for it: forget withdraws the
    completion recorded meanwhile and says so, and the next run rebuilds the object."""
    env = s3_env(s3, sqlite_ledger, local_tmp)
    uri = f"/vsis3/{prefix}/v.tif"
    command = warp_cmd(source, "/vsiidem/" + uri, "-ts", "64", "64")
    run(command, env=env, check=True)
    etag = etag_of(uri)
    resume = local_tmp.parent / "resume-forget"
    forget = start_paused([GDAL_IDEM, "--ledger", sqlite_ledger.dsn, "--json", "forget",
                           "--output", uri, "--delete-output"], env, "before_object_delete",
                          resume_file=resume)
    try:
        run(command, env=env, check=True)  # the rerun: the row is gone, so it builds
        assert etag_of(uri) == etag, "the rerun did not upload the same bytes"
        [rerun] = [r for r in sqlite_ledger.rows() if r["completed_at"] is not None]
    finally:
        resume.write_text("go")
        out, err = forget.communicate(timeout=300)
    assert forget.returncode == 1, out + err
    (output,) = json.loads(out)["outputs"]
    assert output["deleted"] == [uri], output
    assert "withdrawn" in output["kept_because"] and rerun["work_key"][:12] in output["kept_because"]
    assert not object_exists(uri)
    assert [r for r in sqlite_ledger.rows() if r["completed_at"] is not None] == [], \
        "a completed row vouches for a deleted object"
    run(command, env=env, check=True)
    assert object_exists(uri)


def test_s3_bad_bucket_or_credentials_fail_cleanly(s3, sqlite_ledger, source, local_tmp, prefix):
    env = s3_env(s3, sqlite_ledger, local_tmp)
    proc = run(warp_cmd(source, "/vsiidem//vsis3/no-such-bucket/x.tif"), env=env)
    assert proc.returncode != 0 and "no-such-bucket" in proc.stderr
    secret = "wrong-secret-" + uuid.uuid4().hex[:8]
    bad = dict(env, AWS_ACCESS_KEY_ID="NOT-A-KEY", AWS_SECRET_ACCESS_KEY=secret)
    uri = f"/vsis3/{prefix}/denied.tif"
    proc = run(warp_cmd(source, "/vsiidem/" + uri), env=bad)
    assert proc.returncode != 0 and uri in proc.stderr
    assert secret not in proc.stderr + proc.stdout
    assert not object_exists(uri)
    rows = sqlite_ledger.rows()
    assert rows and all(r["completed_at"] is None and r["released_at"] is not None for r in rows)
    assert temp_dirs(local_tmp) == []


def listings_of(requests, directory_key):
    """The LIST requests (GET /bucket/?prefix=...) of `directory_key`'s contents."""
    found = []
    for method, path, *_ in requests:
        parsed = urllib.parse.urlparse(path)
        prefix = urllib.parse.parse_qs(parsed.query).get("prefix", [None])[0]
        if method == "GET" and prefix == directory_key + "/":
            found.append(path)
    return found


@pytest.mark.parametrize("conditional", ["AUTO", "NO"])
def test_s3_gdalwarp_first_run_sends_no_more_requests_than_plain(s3, sqlite_ledger, source,
                                                                 local_tmp, prefix, conditional):
    """gdalwarp looks at its output before warping; GDAL's CreateCopy then probes the output
    with an open, which on object storage lists the output's directory. /vsiidem/ answers that
    open from gdalwarp's look moments before, which saves a request of plain gdalwarp to /vsis3/
    (which lists the directory before creating its output). The look at the object that makes
    the upload conditional (IDEM_CONDITIONAL_WRITE=AUTO, the default) spends it again: as many
    requests as plain gdalwarp, one fewer with IDEM_CONDITIONAL_WRITE=NO."""
    bucket, folder = prefix.split("/", 1)
    plain_uri = f"/vsis3/{prefix}/plain/12/2200/1343.tif"
    idem_uri = f"/vsis3/{prefix}/idem/12/2200/1343.tif"
    mark = s3.mark()
    run(["gdalwarp", "-overwrite", "-of", "GTiff", "-t_srs", "EPSG:3857", "-r", "bilinear",
         source, plain_uri],
        env=s3_env(s3, sqlite_ledger, local_tmp, CPL_VSIL_USE_TEMP_FILE_FOR_RANDOM_WRITE="YES"),
        check=True)
    plain = s3.requests_since(mark)
    mark = s3.mark()
    proc = run(warp_cmd(source, "/vsiidem/" + idem_uri),
               env=s3_env(s3, sqlite_ledger, local_tmp, IDEM_CONDITIONAL_WRITE=conditional),
               check=True)
    idem = s3.requests_since(mark)
    assert len(listings_of(plain, f"{folder}/plain/12/2200")) == 1, plain
    assert listings_of(idem, f"{folder}/idem/12/2200") == [], idem
    object_path = idem_uri[len("/vsis3"):]
    if conditional == "AUTO":
        assert len(idem) == len(plain), (plain, idem)
        assert idem[-2][:2] == ("GET", object_path)  # the look the upload is conditional on
    else:
        assert len(idem) == len(plain) - 1, (plain, idem)
    assert idem[-1][:2] == ("PUT", object_path)
    rows = sqlite_ledger.completed()
    assert [r["output_uri"] for r in rows] == [idem_uri]
    assert (read_pixels(idem_uri) == read_pixels(plain_uri)).all()


# One process: a Stat through /vsiidem/ finds an object missing, something happens, and the
# object is opened for reading through /vsiidem/. Prints what each open read (null: missing).
LOOK_THEN_OPEN = """
import json, subprocess, sys, time
from osgeo import gdal
bucket, endpoint = sys.argv[1], sys.argv[2]
PUT = ("import sys; from osgeo import gdal; f = gdal.VSIFOpenL(sys.argv[1], 'wb'); "
       "gdal.VSIFWriteL(sys.argv[2].encode(), 1, len(sys.argv[2]), f); gdal.VSIFCloseL(f)")

def looks_missing(uri):
    return gdal.VSIStatL("/vsiidem/" + uri) is None

def read(uri):
    f = gdal.VSIFOpenL("/vsiidem/" + uri, "rb")
    if f is None:
        return None
    data = gdal.VSIFReadL(1, 100, f)
    gdal.VSIFCloseL(f)
    return data.decode()

def write(path, text):
    f = gdal.VSIFOpenL(path, "wb")
    gdal.VSIFWriteL(text.encode(), 1, len(text), f)
    gdal.VSIFCloseL(f)

results = {}
uri = f"/vsis3/{bucket}/here/written.bin"  # written by this process, straight to /vsis3/
assert looks_missing(uri)
write(uri, "here")
results["written here"] = read(uri)

uri = f"/vsis3/{bucket}/published/written.bin"  # published through /vsiidem/, GDAL's cache then cleared
assert looks_missing(uri)
write("/vsiidem/" + uri, "published")
gdal.VSICurlClearCache()
results["published here"] = read(uri)

uri = f"/vsis3/{bucket}/elsewhere/written.bin"  # written by another process
assert looks_missing(uri)
subprocess.run([sys.executable, "-c", PUT, uri, "elsewhere"], check=True)
results["elsewhere, at once"] = read(uri)
results["elsewhere, GDAL's own Stat"] = gdal.VSIStatL(uri) is not None
looks_missing(uri)  # a look again (GDAL 3.6 answers it from its cache, 3.10 may ask the store)
time.sleep(2.2)  # the look's 2 s lifetime running out is what this step tests
results["elsewhere, 2 s after the look"] = read(uri)

uri = f"/vsis3/{bucket}/many/written.bin"  # looks at 70 more objects: the first look still stands
assert looks_missing(uri)
subprocess.run([sys.executable, "-c", PUT, uri, "many"], check=True)
assert not any(not looks_missing(f"/vsis3/{bucket}/many/other-{i}.bin") for i in range(70))
results["elsewhere, after 70 more looks"] = read(uri)

uri = f"/vsis3/{bucket}/unreachable/written.bin"  # the look failed: the store could not be reached
gdal.SetConfigOption("AWS_S3_ENDPOINT", "127.0.0.1:1")
assert looks_missing(uri)
gdal.SetConfigOption("AWS_S3_ENDPOINT", endpoint)
subprocess.run([sys.executable, "-c", PUT, uri, "unreachable"], check=True)
results["after a failed look"] = read(uri)
print(json.dumps(results))
"""


def test_s3_open_after_a_look_that_found_nothing(s3, local_tmp, prefix):
    """A read-open through /vsiidem/ of an object a Stat found missing less than 2 s before is
    answered from that Stat, unless this process wrote the object since (straight to /vsis3/,
    or published through /vsiidem/); a look that could not reach the store answers nothing."""
    env = env_with(CPL_TMPDIR=local_tmp, **s3.config())
    proc = run(["/usr/bin/python3", "-c", LOOK_THEN_OPEN, prefix, s3.config()["AWS_S3_ENDPOINT"]],
               env=env, check=True)
    expected = {
        "written here": "here",
        "published here": "published",
        "elsewhere, at once": None,
        "elsewhere, GDAL's own Stat": False,
        "elsewhere, 2 s after the look": "elsewhere",
        "elsewhere, after 70 more looks": None,
        "after a failed look": "unreachable",
    }
    if gdal_at_least("3.10"):
        # On GDAL 3.10 and 3.13 such an open goes to the store (its cause in GDAL's /vsis3/ cache
        # is not pinned down yet): a request more, never a wrong answer (docs/vsiidem.md).
        expected.update({"elsewhere, at once": "elsewhere", "elsewhere, GDAL's own Stat": True,
                         "elsewhere, after 70 more looks": "many"})
    assert json.loads(proc.stdout) == expected


def test_s3_returned_dataset_has_its_sidecars_without_listing_the_bucket(s3, sqlite_ledger,
                                                                         source, local_tmp,
                                                                         prefix):
    """The dataset handed back after publishing opens the object on first use, with the files
    just uploaded as its siblings: its pixels are the source's, a PNG's georeferencing (in its
    .aux.xml sidecar) is there, and opening it sends no LIST request to the bucket."""
    uri = f"/vsis3/{prefix}/tiles/scene.png"
    code = ("import sys; from osgeo import gdal; gdal.UseExceptions()\n"
            "ds = gdal.Translate(sys.argv[2], sys.argv[1], format='IDEM', "
            "creationOptions=['FORMAT=PNG'])\n"
            "print(list(ds.GetGeoTransform())); print(ds.GetSpatialRef().GetAuthorityCode(None))\n"
            "print(sorted(f.rsplit('/', 1)[-1] for f in ds.GetFileList()))\n"
            "print([ds.GetRasterBand(i + 1).Checksum() for i in range(ds.RasterCount)])\n")
    mark = s3.mark()
    proc = run(["/usr/bin/python3", "-c", code, source, "/vsiidem/" + uri],
               env=s3_env(s3, sqlite_ledger, local_tmp), check=True)
    geotransform, epsg, files, checksums = proc.stdout.strip().splitlines()
    # Read through the dataset handed back (it opens the object on first use).
    local = gdal.Open(str(source))
    assert checksums == str([local.GetRasterBand(i + 1).Checksum()
                             for i in range(local.RasterCount)])
    assert geotransform == str(list(gdal.Open(str(source)).GetGeoTransform()))
    assert epsg == "32633"
    assert files == str(["scene.png", "scene.png.aux.xml"])
    requests = s3.requests_since(mark)
    puts = [i for i, r in enumerate(requests) if r[0] == "PUT"]
    assert [requests[i][1] for i in puts] == [f"/{prefix}/tiles/scene.png.aux.xml",
                                             f"/{prefix}/tiles/scene.png"]
    after = requests[puts[-1] + 1:]
    assert [r for r in after if "?" in r[1]] == [], after  # no listing once published
    assert len(sqlite_ledger.completed()) == 1


SLOW_LOOKS = """
import json, os, sys, threading, time
from osgeo import gdal
gdal.UseExceptions()
bucket, local, arrivals = sys.argv[1:4]
for name in ("old.bin", "other.bin"):
    f = gdal.VSIFOpenL(f"/vsis3/{bucket}/slow/{name}", "wb")  # a PUT: not slowed
    gdal.VSIFWriteL(b"old", 1, 3, f)
    gdal.VSIFCloseL(f)
gdal.VSICurlClearCache()
report = {}

def events(kind):
    with open(arrivals) as f:
        return [line.split()[1:] for line in f if line.startswith(kind + " ")]

def wait_for(condition):
    # A guard against a hang, not a bound the test asserts: the event comes in milliseconds.
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, "the store never saw the request"
        time.sleep(0.01)

def local_write(name):
    f = gdal.VSIFOpenL(f"/vsiidem/{local}/{name}", "wb")
    gdal.VSIFWriteL(b"x", 1, 1, f)
    gdal.VSIFCloseL(f)

def write_object():
    f = gdal.VSIFOpenL(f"/vsiidem//vsis3/{bucket}/slow/new.bin", "wb")
    gdal.VSIFWriteL(b"new", 1, 3, f)
    gdal.VSIFCloseL(f)
    return 0

for key, call in (("unlink", lambda: gdal.Unlink(f"/vsiidem//vsis3/{bucket}/slow/old.bin")),
                  ("write", write_object)):
    seen = len(events("ARRIVED"))
    answered = len(events("ANSWERING"))
    worker = threading.Thread(target=lambda: report.__setitem__(key + "_result", call()))
    worker.start()
    wait_for(lambda: len(events("ARRIVED")) > seen)  # the worker now waits for the store
    local_write(key + ".txt")
    # The store had not begun to answer the worker's request when the local write was done
    # (it logs that before it sends the answer).
    report[key + "_local_first"] = len(events("ANSWERING")) == answered
    worker.join()
    report[key + "_answered_after"] = len(events("ANSWERING")) > answered
report["old_hidden"] = gdal.VSIStatL(f"/vsiidem//vsis3/{bucket}/slow/old.bin") is None
print(json.dumps(report), flush=True)
"""


def test_vsiidem_does_not_hold_other_threads_while_the_store_answers(tmp_path):
    """/vsiidem/ keeps one lock for its process; looking at an object (a request, seconds on a
    slow store) happens outside it, so other threads' /vsiidem/ calls go on meanwhile: a thread
    unlinking or creating an object does not hold up another one writing a local file."""
    import json
    server = S3Server(tmp_path / "slow-s3rver", buckets=[BUCKET], slow=("/slow/", 2000)).start()
    try:
        local = tmp_path / "local"
        local.mkdir()
        mark = server.mark()
        proc = run(["/usr/bin/python3", "-c", SLOW_LOOKS, BUCKET, local, server.arrivals_path],
                   env=env_with(CPL_TMPDIR=tmp_path, **server.config()))
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        # Each worker's request reached the store, which answered it only after the local
        # write of another thread was done: that write did not wait for it.
        assert report["unlink_local_first"] and report["write_local_first"], report
        assert report["unlink_answered_after"] and report["write_answered_after"], report
        assert report["unlink_result"] == 0 and report["old_hidden"], report
        assert (local / "unlink.txt").read_bytes() == b"x"
        assert (local / "write.txt").read_bytes() == b"x"
        requests = server.requests_since(mark)
        assert any(r[0] == "PUT" and r[1].endswith("/slow/new.bin") for r in requests)
        # The unlink was deferred to the end of the process, and carried out there.
        assert [r[1] for r in requests if r[0] == "DELETE"] == [f"/{BUCKET}/slow/old.bin"]
    finally:
        server.stop()


EXIT_DELETE = """
import sys, threading
from osgeo import gdal
gdal.UseExceptions()
uri = sys.argv[1]
f = gdal.VSIFOpenL(uri, "wb")
gdal.VSIFWriteL(b"old", 1, 3, f)
gdal.VSIFCloseL(f)
# Like a job that used threads (GDAL's network file systems keep state per thread).
worker = threading.Thread(target=lambda: gdal.VSIStatL(uri))
worker.start()
worker.join()
assert gdal.Unlink("/vsiidem/" + uri) == 0
assert gdal.VSIStatL("/vsiidem/" + uri) is None  # hidden now, deleted at the end
print("unlinked", flush=True)
if len(sys.argv) > 2:
    input()  # the test stops the store, then lets the process end
"""


def test_python_process_carries_out_deferred_object_delete_at_exit(s3, tmp_path, prefix):
    """A Python process (which never unloads GDAL's drivers) deletes an object through
    /vsiidem/: the delete is deferred to the end of the process and carried out there; the
    process ends normally (GDAL 3.6 crashed or looped on a request from the exit handler)."""
    uri = f"/vsis3/{prefix}/gone.bin"
    mark = s3.mark()
    proc = run(["/usr/bin/python3", "-c", EXIT_DELETE, uri], timeout=60,
               env=env_with(CPL_TMPDIR=tmp_path, **s3.config()))
    assert proc.returncode == 0, proc.stderr
    assert "unlinked" in proc.stdout
    assert not object_exists(uri)
    assert [r[1] for r in s3.requests_since(mark) if r[0] == "DELETE"] == [f"/{prefix}/gone.bin"]


def test_python_process_ends_when_the_store_is_gone_at_exit(tmp_path):
    """The store stops answering before the process ends: its deferred delete fails with a
    message naming the object, and the process still ends promptly, without a crash."""
    server = S3Server(tmp_path / "gone-s3rver", buckets=[BUCKET]).start()
    stopped = False
    try:
        uri = f"/vsis3/{BUCKET}/later/kept.bin"
        proc = subprocess.Popen(["/usr/bin/python3", "-c", EXIT_DELETE, uri, "wait"],
                                env=env_with(CPL_TMPDIR=tmp_path, **server.config()),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "unlinked"
        server.stop()
        stopped = True
        _, err = proc.communicate("\n", timeout=120)  # a hang fails here
        assert proc.returncode == 0, err
        assert f"deferred delete of /vsis3/{BUCKET}/later/kept.bin failed" in err, err
    finally:
        if not stopped:
            server.stop()


def test_s3_zombie_upload_refused_does_not_leave_its_object(s3, sqlite_ledger, source,
                                                          local_tmp, prefix, tmp_path):
    """The object-storage fallback of the fenced publish (s3rver honours no conditional write):
    a worker whose claim was taken over elsewhere uploads, its completion is refused, and it
    deletes the object it uploaded, so the key never holds pixels no completed row describes."""
    from idem_testlib import PausedWorker
    from test_safety import take_over_in_sql
    uri = f"/vsis3/{prefix}/zombie2.tif"
    env = s3_env(s3, sqlite_ledger, local_tmp)
    zombie = PausedWorker(warp_cmd(source, "/vsiidem/" + uri), env, "before_commit", tmp_path)
    try:
        take_over_in_sql(sqlite_ledger, zombie.proc.pid)
        code, stderr = zombie.resume()
    finally:
        zombie.kill()
    assert code != 0 and "taken over by another worker" in stderr
    assert not object_exists(uri)
    assert [r["claim_token"] for r in sqlite_ledger.completed()] == ["taken-over-elsewhere"]


OB_TRAN = ("+proj=ob_tran +o_proj=longlat +o_lon_p=0 +o_lat_p=30 +lon_0=0 +datum=WGS84 "
           "+no_defs")


def test_s3_publish_removes_the_replaced_outputs_sidecar_object_at_once(s3, sqlite_ledger,
                                                                        source, local_tmp,
                                                                        prefix):
    """Work A uploads out.tif and out.tif.aux.xml; work B at the same key prefix writes no
    sidecar: when B returns (in the same process), A's sidecar object is gone, and a skip of B
    does not bring it back."""
    uri = f"/vsis3/{prefix}/side.tif"
    code = f"""
import sys
from osgeo import gdal
gdal.UseExceptions()
def exists(path):
    gdal.VSICurlClearCache()
    return gdal.VSIStatL(path) is not None
dst, src = {"/vsiidem/" + uri!r}, {source!r}
gdal.Warp(dst, src, format="IDEM", dstSRS={OB_TRAN!r})
assert exists({uri + ".aux.xml"!r}), "work A uploaded no sidecar"
gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857")
print("after B", exists({uri + ".aux.xml"!r}))
gdal.Warp(dst, src, format="IDEM", dstSRS="EPSG:3857")
print("after skip", exists({uri + ".aux.xml"!r}))
"""
    proc = run(["/usr/bin/python3", "-c", code], env=s3_env(s3, sqlite_ledger, local_tmp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "after B False" in proc.stdout and "after skip False" in proc.stdout
    assert not object_exists(uri + ".aux.xml")


def test_s3_a_deleted_sidecar_object_is_rebuilt_not_skipped_onto(s3, sqlite_ledger, source,
                                                                 local_tmp, prefix):
    """FORMAT=PNG on object storage: the georeferencing lives in p.png.aux.xml. Deleting that
    object makes the rerun rebuild, instead of serving the PNG without georeferencing."""
    uri = f"/vsis3/{prefix}/p.png"
    env = s3_env(s3, sqlite_ledger, local_tmp)
    cmd = ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-co", "FORMAT=PNG", "-t_srs",
           "EPSG:3857", "-ts", "64", "64", source, "/vsiidem/" + uri]
    run(cmd, env=env, check=True)
    assert object_exists(uri + ".aux.xml")
    gdal.Unlink(uri + ".aux.xml")
    assert not object_exists(uri + ".aux.xml")
    run(cmd, env=env, check=True)
    assert object_exists(uri + ".aux.xml")
    assert [r["attempt"] for r in sqlite_ledger.completed()] == [2]
