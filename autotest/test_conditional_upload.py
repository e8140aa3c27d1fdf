# SPDX-License-Identifier: MIT
"""The publish to object storage fenced by the store itself (docs/object-storage.md): each upload
to /vsis3/ is conditional (If-Match on the ETag seen before the claim was last checked,
If-None-Match: * where there was no object), so a worker whose claim is gone cannot upload over
what another worker published meanwhile. Run against moto's S3 server, which honours conditional
writes as S3 does; s3rver, which ignores them, shows the documented fallback. Leases are ended in
SQL and stopped workers go on when their resume file appears: nothing waits on the clock."""

import base64
import json
import os
import re
import signal
import subprocess
import types

import pytest
from osgeo import gdal, osr

from idem_testlib import (GDAL_IDEM, gdal_at_least, gdal_config, make_source, read_pixels, run,
                          share_keeps, wait_until)
from idem_testlib import start_paused as start_worker_paused
from azuriteserver import AzuriteServer, azure_config
from faultproxy import FaultProxy
import gcsserver
from gcsserver import TEST_BEARER, TEST_HMAC, GcsServer
from motoserver import PYTHON, MotoS3Server
from test_fault_matrix import RESAMPLING, Case, warp
from test_object_store import BUCKET, s3  # noqa: F401  (the module's s3rver fixture)


@pytest.fixture(scope="module")
def moto():
    server = MotoS3Server(buckets=[BUCKET]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, "gcs", BUCKET)


@pytest.fixture(scope="module")
def gcs_hmac(tmp_path_factory):
    """The GCS store checking each request's HMAC signature (GDAL's and IDEM's)."""
    yield from gcsserver.started(tmp_path_factory, "gcs-hmac", BUCKET, hmac=TEST_HMAC)


@pytest.fixture(scope="module")
def gcs_gce(tmp_path_factory):
    """The GCS store requiring the token it serves as a Compute Engine metadata server."""
    yield from gcsserver.started(tmp_path_factory, "gcs-gce", BUCKET, bearer=TEST_BEARER)


@pytest.fixture(scope="module")
def gcs_refresh(tmp_path_factory):
    """The GCS store requiring the token its OAuth2 endpoint gives for a refresh token."""
    yield from gcsserver.started(tmp_path_factory, "gcs-refresh", BUCKET, oauth="refresh")


@pytest.fixture(scope="module")
def gcs_service_account(tmp_path_factory):
    """The GCS store requiring the token its OAuth2 endpoint gives for a service account's JWT
    (GOOGLE_APPLICATION_CREDENTIALS naming the account's JSON key)."""
    yield from gcsserver.started(tmp_path_factory, "gcs-service-account", BUCKET,
                                 oauth="service_account")


@pytest.fixture(scope="module")
def gcs_requester_pays(tmp_path_factory):
    """A requester-pays bucket (each request names GS_USER_PROJECT), requests signed with HMAC."""
    yield from gcsserver.started(tmp_path_factory, "gcs-requester-pays", BUCKET, hmac=TEST_HMAC,
                                 user_project=gcsserver.TEST_USER_PROJECT)


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    server = AzuriteServer(tmp_path_factory.mktemp("azurite")).start()
    with gdal_config(server.config()):
        assert gdal.Mkdir(f"/vsiaz/{BUCKET}", 0o755) == 0  # the container
    yield server
    server.stop()


class ThroughDataLake:
    """Azurite with the outputs named /vsiadls/container/...: GDAL reads them through /vsiadls/
    (Azurite's blob endpoint answers its HEAD and GET), IDEM writes and deletes them with its Blob
    requests. Azurite has no Data Lake endpoint, so GDAL's own /vsiadls/ writer cannot run
    against it: no unconditional case here."""

    def __init__(self, azurite):
        self.azurite = azurite

    def config(self):
        return self.azurite.config()


@pytest.fixture
def store(request, moto, s3, gcs, azurite):  # noqa: F811
    """(server, IDEM_CONDITIONAL_WRITE), with this process's GDAL pointed at the server."""
    name, mode = request.param
    servers = {"moto": moto, "s3rver": s3, "gcs": gcs, "azurite": azurite,
               "adls": lambda: ThroughDataLake(azurite),
               "gcs-hmac": lambda: request.getfixturevalue("gcs_hmac"),
               "gcs-gce": lambda: request.getfixturevalue("gcs_gce"),
               "gcs-refresh": lambda: request.getfixturevalue("gcs_refresh"),
               "gcs-service-account": lambda: request.getfixturevalue("gcs_service_account"),
               "gcs-requester-pays": lambda: request.getfixturevalue("gcs_requester_pays")}
    server = servers[name]() if callable(servers[name]) else servers[name]
    with gdal_config(server.config()):
        yield server, mode


def fencing_store(store):
    """Whether the store refuses a conditional upload that no longer holds (moto, the GCS
    store) and IDEM sends conditions to it."""
    return (isinstance(store[0], (MotoS3Server, GcsServer, AzuriteServer, ThroughDataLake))
            and store[1] == "AUTO")


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("conditional") / "scene.tif", size=96)


def start_paused(case, work, name, command=warp):
    """A worker on `work` stopped at before_commit (it has looked at the object and checked its
    claim); it goes on when the returned resume file is written. It runs as if on a host of its
    own: its local temporary directory (CPL_TMPDIR) is its own, so a worker taking its claim over
    cannot remove its temporary files (which would stop it before it uploads)."""
    resume = case.tmp / f"resume-{name}"
    host_tmp = case.tmp / f"host-{name}"
    host_tmp.mkdir()
    env = dict(case.env, IDEM_STALE_SECONDS="2", CPL_TMPDIR=str(host_tmp))
    proc = start_worker_paused(command(case.source, case.dst, work), env, "before_commit",
                               resume_file=resume)
    return proc, resume


def make_case(tmp_path, store, scene):
    server, mode = store
    kind = {GcsServer: "gcs", AzuriteServer: "azure", ThroughDataLake: "adls"}.get(type(server),
                                                                                 "s3")
    case = Case(tmp_path, kind, server, scene)
    case.env["IDEM_CONDITIONAL_WRITE"] = mode
    return case


def completed(case, work):
    return [r for r in case.rows(work) if r["completed_at"] is not None]


def zombie_after_newer_work(case, command=warp, while_stopped=None):
    """Worker A (K1) stops right before its upload; once its lease has run out, B takes K1 over
    and completes, then C completes K2 at the same object; `while_stopped()` runs then, and its
    answer is returned with A's exit status and stderr once A has gone on and ended."""
    a, resume = start_paused(case, "K1", "a", command=command)
    a.send_signal(signal.SIGSTOP)
    seen = None
    try:
        case.wait_for_lease_end(a.pid)
        run(command(case.source, case.dst, "K1"), env=case.env, check=True)  # B
        run(command(case.source, case.dst, "K2"), env=case.env, check=True)  # C
        seen = while_stopped() if while_stopped is not None else None
    finally:
        resume.write_text("go")
        a.send_signal(signal.SIGCONT)
        _, stderr = a.communicate(timeout=300)
    return a.returncode, stderr, seen


# The test matrix's share runs one store of each kind (S3, GCS, Azure), conditional.
@pytest.mark.parametrize("store", share_keeps(
                             [("moto", "AUTO"), ("moto", "NO"), ("s3rver", "AUTO"), ("gcs", "AUTO"),
                              ("gcs", "NO"), ("azurite", "AUTO"), ("azurite", "NO"),
                              ("adls", "AUTO")],
                             kept=[("moto", "AUTO"), ("gcs", "AUTO"), ("azurite", "AUTO")]),
                         indirect=True,
                         ids=["moto", "moto-unconditional", "s3rver", "gcs", "gcs-unconditional",
                              "azurite", "azurite-unconditional", "adls"])
def test_zombie_upload_after_a_takeover_and_newer_work(store, scene, tmp_path):
    """Worker A (work K1) stops right before its upload; its lease runs out; B takes K1 over and
    completes; C completes K2 at the same object; A goes on. Where the store honours conditional
    writes, A's upload is refused and C's output stays, recorded. Without them (s3rver, or
    IDEM_CONDITIONAL_WRITE=NO), A's upload replaces C's object, C's row no longer records what is
    there, and C's rerun rebuilds it (never a skip)."""
    case = make_case(tmp_path, store, scene)
    returncode, stderr, c_output = zombie_after_newer_work(case, while_stopped=case.output)
    assert any(case.records(r, c_output) for r in completed(case, "K2"))
    assert returncode != 0, stderr
    output = case.output()
    [k2] = completed(case, "K2")
    assert k2["superseded_at"] is None
    assert len(completed(case, "K1")) == 1  # B's, nothing of A's
    if fencing_store(store):
        assert output == c_output, "A's late upload replaced newer work"
        assert case.records(k2, output)
    else:
        # The fallback: A's upload replaced C's object (A then keeps it: its bytes are those of
        # B's completion of the same work), so C's row no longer records the object at the path.
        assert output != c_output and not case.records(k2, output)
    # Either way a rerun of K2 ends with its pixels at the path, recorded.
    run(warp(case.source, case.dst, "K2"), env=case.env, check=True)
    output = case.output()
    assert any(case.records(r, output) for r in completed(case, "K2"))
    assert case.temp_dirs() == []


@pytest.mark.parametrize("store", [("moto", "AUTO"), ("gcs", "AUTO"), ("azurite", "AUTO"),
                                   ("adls", "AUTO")],
                         indirect=True, ids=["moto", "gcs", "azurite", "adls"])
def test_claim_holder_uploads_over_a_zombies_object(store, scene, tmp_path):
    """The store refuses the upload of the worker that does hold the claim when a zombie's upload
    changed the object after that worker looked at it: the worker looks again and uploads. Here
    A (K1) and, after A's lease ran out, B (K1, taking it over) both stop before their upload
    over an older output K0; A goes on, uploads over K0 (nothing changed it since A looked),
    is refused its completion and takes its object back; then B goes on: its upload, conditional
    on K0, is refused, and B publishes after looking again."""
    case = make_case(tmp_path, store, scene)
    run(warp(case.source, case.dst, "K0"), env=case.env, check=True)
    a, resume_a = start_paused(case, "K1", "a")
    a.send_signal(signal.SIGSTOP)
    b = None
    try:
        case.wait_for_lease_end(a.pid)
        b, resume_b = start_paused(case, "K1", "b")
        resume_a.write_text("go")
        a.send_signal(signal.SIGCONT)
        _, a_err = a.communicate(timeout=300)
        assert a.returncode != 0, a_err
        assert case.output() is None, "A's object, uploaded without a claim, was not taken back"
        resume_b.write_text("go")
        _, b_err = b.communicate(timeout=300)
    finally:
        for proc, resume in ((a, resume_a), (b, None)):
            if proc is not None and proc.poll() is None:
                if resume is not None:
                    resume.write_text("go")
                proc.kill()
                proc.wait()
    assert b.returncode == 0, b_err
    output = case.output()
    [k1] = completed(case, "K1")
    assert case.records(k1, output) and k1["superseded_at"] is None
    direct = tmp_path / "direct.tif"
    run(["gdalwarp", "-q", "-of", "GTiff", "-t_srs", "EPSG:3857", "-ts", "48", "48", "-r",
         "bilinear", case.source, direct], check=True)
    assert (read_pixels(case.dst) == read_pixels(direct)).all()
    assert case.temp_dirs() == []


def test_gcs_uploads_carry_the_generation_they_replace(gcs, scene, tmp_path):
    """On /vsigs/ each upload names the object it may replace: generation 0 (none) on the first
    run, the generation it saw on a run of other work at the same object; a skip sends nothing;
    and IDEM_CONDITIONAL_WRITE=NO sends no condition."""
    with gdal_config(gcs.config()):
        case = Case(tmp_path, "gcs", gcs, scene)
        key = case.dst[len("/vsigs"):]
        mark = gcs.mark()
        run(warp(case.source, case.dst, "K1"), env=case.env, check=True)
        puts = [r for r in gcs.writes_since(mark) if r[0] == "PUT"]
        assert [(r[1], r[3]) for r in puts] == [(key, "0")]
        generation = gdal.GetFileMetadata(case.dst, "HEADERS")["x-goog-generation"]
        mark = gcs.mark()
        run(warp(case.source, case.dst, "K1"), env=case.env, check=True)  # a skip
        assert gcs.writes_since(mark) == []
        run(warp(case.source, case.dst, "K2"), env=case.env, check=True)
        puts = [r for r in gcs.writes_since(mark) if r[0] == "PUT"]
        assert [(r[1], r[3]) for r in puts] == [(key, generation)]
        [k2] = completed(case, "K2")
        assert case.records(k2, case.output())
        mark = gcs.mark()
        run(warp(case.source, case.dst, "K0"), env=dict(case.env, IDEM_CONDITIONAL_WRITE="NO"),
            check=True)
        assert [(r[1], r[3]) for r in gcs.writes_since(mark) if r[0] == "PUT"] == [(key, "-")]


@pytest.mark.parametrize("option", ["IDEM_CONDITIONAL_WRITE=SOMETIMES", "IDEM_AZURE_BLOCK_SIZE=0",
                                    "IDEM_AZURE_BLOCK_SIZE=4001", "IDEM_AZURE_BLOCK_SIZE=1MB",
                                    "IDEM_GCS_CHUNK_SIZE=0", "IDEM_GCS_CHUNK_SIZE=5121"])
def test_bad_conditional_write_option_is_refused_before_any_work(moto, scene, tmp_path, option):
    case = Case(tmp_path, "s3", moto, scene)
    name, value = option.split("=")
    env = dict(case.env, **{name: value})
    proc = run(warp(case.source, case.dst, "K1"), env=env)
    assert proc.returncode != 0
    assert f"{option} is not valid" in proc.stderr
    assert case.output() is None
    db = tmp_path / "ledger.sqlite"
    assert not db.exists() or case.rows() == []


def warp_in_parts(src, dst, work):
    """A 1500 x 1500 x 3 GeoTIFF (6.75 MB): with VSIS3_CHUNK_SIZE=5, GDAL sends it in two parts."""
    return ["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:3857", "-ts", "1500",
            "1500", "-r", RESAMPLING[work], src, "/vsiidem/" + dst]


def store_etag(path):
    gdal.VSICurlClearCache()
    headers = gdal.GetFileMetadata(path, "HEADERS") or {}
    return headers.get("ETag") or headers.get("etag")


def multipart_uploads(server, key):
    """The multipart uploads the store holds for `key` (boto3, in the tests' venv)."""
    code = ("import boto3, json, sys\n"
            f"c = boto3.client('s3', endpoint_url='http://127.0.0.1:{server.port}', "
            "region_name='us-east-1', aws_access_key_id='moto', aws_secret_access_key='moto')\n"
            f"print(json.dumps([u['UploadId'] for u in c.list_multipart_uploads("
            f"Bucket='{BUCKET}', Prefix='{key}').get('Uploads', [])]))")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("before", ["no-object", "older-output"])
@pytest.mark.parametrize("store", share_keeps([("moto", "AUTO"), ("moto", "NO")],
                                               kept=[("moto", "AUTO")]),
                         indirect=True, ids=["moto", "moto-unconditional"])
def test_zombie_multipart_upload_is_refused_at_its_completion(store, scene, tmp_path, before):
    """The zombie test for an object GDAL uploads in parts. A (K1) stops before its upload,
    having seen no object (If-None-Match: *) or an older completion's (If-Match on its ETag); its
    lease runs out; B takes K1 over and completes; C completes K2 there; A goes on. The condition
    rides on A's CompleteMultipartUpload: refused, C's object stays, recorded, and on GDAL 3.10+
    A's upload is aborted (no parts left). With IDEM_CONDITIONAL_WRITE=NO, A's upload lands."""
    case = make_case(tmp_path, store, scene)
    case.env["VSIS3_CHUNK_SIZE"] = "5"
    key = case.dst[len(f"/vsis3/{BUCKET}/"):]
    if before == "older-output":
        run(warp_in_parts(case.source, case.dst, "K0"), env=case.env, check=True)
    returncode, stderr, (c_etag, c_recorded) = zombie_after_newer_work(
        case, warp_in_parts,
        lambda: (store_etag(case.dst), case.records(completed(case, "K2")[0], case.output())))
    assert c_etag and c_etag.strip('"').endswith("-2"), c_etag  # sent in two parts
    assert c_recorded
    assert returncode != 0, stderr
    [k2] = completed(case, "K2")
    if store[1] == "AUTO":
        assert store_etag(case.dst) == c_etag, "A's late upload replaced newer work"
        assert case.records(k2, case.output()) and k2["superseded_at"] is None
        if gdal_at_least("3.10"):
            assert multipart_uploads(store[0], key) == []
        before_rerun = store_etag(case.dst)
        run(warp_in_parts(case.source, case.dst, "K2"), env=case.env, check=True)
        assert store_etag(case.dst) == before_rerun  # skipped
    else:
        assert store_etag(case.dst) != c_etag
        run(warp_in_parts(case.source, case.dst, "K2"), env=case.env, check=True)
        assert any(case.records(r, case.output()) for r in completed(case, "K2"))
    assert case.temp_dirs() == []


@pytest.mark.parametrize("store", [("moto", "AUTO"), ("gcs", "AUTO"), ("azurite", "AUTO"),
                                   ("adls", "AUTO")],
                         indirect=True, ids=["moto", "gcs", "azurite", "adls"])
def test_a_zombies_take_back_never_deletes_a_successors_object(store, scene, tmp_path):
    """A (K1) uploads, is stopped before its completion and loses its claim (reap releases it).
    Its completion refused, A looks at the object (its own, recorded by no completion) to take
    it back, and stops there. C (K2) then uploads over A's object and completes. A goes on: its
    delete is conditional on the ETag it saw, so the store refuses it and C's object stays,
    recorded. (The look and an unconditional delete let A delete C's newer work.)"""
    case = make_case(tmp_path, store, scene)
    host_tmp = case.tmp / "host-a"
    host_tmp.mkdir()
    resume, reached = case.tmp / "resume", case.tmp / "reached"
    env = dict(case.env, IDEM_TEST_PAUSE_AT="before_complete,before_object_delete",
               IDEM_TEST_PAUSE_SECONDS="600", IDEM_TEST_RESUME_FILE=str(resume),
               IDEM_TEST_REACHED_FILE=str(reached), IDEM_STALE_SECONDS="2",
               CPL_TMPDIR=str(host_tmp))
    a = subprocess.Popen(warp(case.source, case.dst, "K1"), env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (case.tmp / "reached.before_complete").exists() or a.poll() is not None,
                   "A uploaded, before its completion")
        assert a.poll() is None
        a_output = case.output()
        assert a_output is not None
        a.send_signal(signal.SIGSTOP)
        case.wait_for_lease_end(a.pid)
        proc = run([GDAL_IDEM, "--ledger", case.ledger.dsn, "-q", "reap"], env=case.env)
        assert proc.returncode == 1, proc.stderr  # released A's claim
        a.send_signal(signal.SIGCONT)
        (case.tmp / "resume.before_complete").write_text("go")
        wait_until(lambda: (case.tmp / "reached.before_object_delete").exists()
                   or a.poll() is not None, "A about to take its object back")
        assert a.poll() is None
        run(warp(case.source, case.dst, "K2"), env=case.env, check=True)  # C
        c_output = case.output()
        assert c_output != a_output
        (case.tmp / "resume.before_object_delete").write_text("go")
        _, stderr = a.communicate(timeout=300)
    finally:
        for name in ("resume.before_complete", "resume.before_object_delete"):
            (case.tmp / name).write_text("go")
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
            a.wait()
    assert a.returncode != 0, stderr
    assert case.output() == c_output, "A's take-back deleted C's newer object"
    [k2] = completed(case, "K2")
    assert case.records(k2, c_output) and k2["superseded_at"] is None
    assert completed(case, "K1") == []


@pytest.mark.parametrize("store", share_keeps([("azurite", "AUTO"), ("adls", "AUTO")],
                                               kept=[("azurite", "AUTO")]),
                         indirect=True, ids=["azurite", "adls"])
@pytest.mark.parametrize("block_mib", [None, "1"], ids=["put-blob", "block-list"])
def test_azure_zombie_with_a_blob_larger_than_gdals_chunk(store, scene, tmp_path, block_mib):
    """On /vsiaz/ IDEM sends a conditional upload itself, in one Put Blob, or (over
    IDEM_AZURE_BLOCK_SIZE, here 1 MiB) as blocks committed by a conditional Put Block List:
    GDAL's writer would send a 6.75 MB output (over VSIAZ_CHUNK_SIZE, 4 MB) as an append blob in
    several requests, visible half-written, and deletes the blob when a PUT is refused. A (K1)
    stops before its upload over an older output; B takes K1 over, C completes K2; A's upload
    (its blocks sent, its commit refused) leaves C's blob, a block blob, recorded; a rerun of K2
    skips."""
    case = make_case(tmp_path, store, scene)
    if block_mib:
        case.env["IDEM_AZURE_BLOCK_SIZE"] = block_mib
    run(warp_in_parts(case.source, case.dst, "K0"), env=case.env, check=True)
    returncode, stderr, c_output = zombie_after_newer_work(case, warp_in_parts, case.output)
    assert c_output[0] > 4 << 20
    assert returncode != 0, stderr
    assert case.output() == c_output, "A's late upload replaced newer work"
    [k2] = completed(case, "K2")
    assert case.records(k2, c_output) and k2["superseded_at"] is None
    gdal.VSICurlClearCache()
    headers = gdal.GetFileMetadata(case.dst, "HEADERS")
    assert headers["x-ms-blob-type"] == "BlockBlob"
    # The blob keeps the MD5 of its bytes either way (a source on Azure is keyed by it).
    assert base64.b64decode(headers["content-md5"]).hex() == c_output[2]
    blob = case.dst.split(f"/{BUCKET}/", 1)[1]
    server = store[0].azurite if isinstance(store[0], ThroughDataLake) else store[0]
    blocks = server.committed_blocks(BUCKET, blob)
    assert len(blocks) == (7 if block_mib else 0), blocks
    run(warp_in_parts(case.source, case.dst, "K2"), env=case.env, check=True)
    assert case.output() == c_output  # skipped: the same blob, the same ETag
    assert case.temp_dirs() == []


@pytest.mark.parametrize("store", [("gcs", "AUTO")], indirect=True, ids=["gcs"])
def test_gcs_zombie_with_an_object_over_gdals_chunk(store, scene, tmp_path):
    """GDAL 3.10 and later send an object of VSIGS_CHUNK_SIZE or more to /vsigs/ as a multipart
    upload whose first request would carry the condition; IDEM sends a conditional upload in one
    PUT instead. With VSIGS_CHUNK_SIZE=5, a 6.75 MB output: every upload is one PUT, and the
    zombie's is refused, leaving C's object, recorded."""
    case = make_case(tmp_path, store, scene)
    case.env["VSIGS_CHUNK_SIZE"] = "5"
    server = store[0]
    mark = server.mark()
    run(warp_in_parts(case.source, case.dst, "K0"), env=case.env, check=True)
    returncode, stderr, c_output = zombie_after_newer_work(case, warp_in_parts, case.output)
    assert c_output[0] > 5 << 20
    assert returncode != 0, stderr
    assert case.output() == c_output, "A's late upload replaced newer work"
    [k2] = completed(case, "K2")
    assert case.records(k2, c_output) and k2["superseded_at"] is None
    key = case.dst[len("/vsigs"):]
    writes = [r for r in server.writes_since(mark) if r[1].startswith(key)]
    assert {r[0] for r in writes} == {"PUT"}, writes  # no multipart upload
    assert all(r[3] != "-" for r in writes)  # each one conditional


@pytest.mark.parametrize(
    # The ways of signing in: GDAL's upload is the same, so the test matrix's share runs one.
    "store", share_keeps([("gcs", "AUTO"), ("gcs-hmac", "AUTO"), ("gcs-gce", "AUTO"),
                          ("gcs-refresh", "AUTO"), ("gcs-service-account", "AUTO"),
                          ("gcs-requester-pays", "AUTO")], kept=[("gcs", "AUTO")]),
    indirect=True, ids=["unsigned", "hmac", "gce", "refresh-token", "service-account",
                        "requester-pays"])
def test_gcs_zombie_with_a_resumable_upload(store, scene, tmp_path):
    """Over IDEM_GCS_CHUNK_SIZE (here 1 MiB) IDEM sends a conditional upload to /vsigs/ itself,
    as a resumable upload: a POST starting the session with x-goog-if-generation-match, then
    chunks, the condition evaluated when the last completes the object (GCS documents no
    condition on the XML multipart upload GDAL 3.10+ uses for large objects, and GDAL's one PUT
    ends at 5120 MiB). A (K1) stops before its upload over an older output; B takes K1 over, C
    completes K2; A's session is refused at its finalization (412) and cancelled, C's object
    stays, recorded with its MD5, and a rerun of K2 skips. With an HMAC key the store checks
    each of IDEM's requests' signature as it checks GDAL's; with OAuth2 credentials (a Compute
    Engine machine's metadata server, a refresh token, a service account's JSON key; the store
    giving the token) each carries the token GDAL's requests carry; in a requester-pays bucket
    each names GS_USER_PROJECT."""
    from gcsserver import open_sessions
    case = make_case(tmp_path, store, scene)
    case.env["IDEM_GCS_CHUNK_SIZE"] = "1"
    server = store[0]
    run(warp_in_parts(case.source, case.dst, "K0"), env=case.env, check=True)
    mark = server.mark()
    returncode, stderr, c_output = zombie_after_newer_work(case, warp_in_parts, case.output)
    assert c_output[0] > 6 << 20
    assert returncode != 0, stderr
    assert case.output() == c_output, "A's late upload replaced newer work"
    [k2] = completed(case, "K2")
    assert case.records(k2, c_output) and k2["superseded_at"] is None
    key = case.dst[len("/vsigs"):]
    requests = [r for r in server.writes_since(mark) if r[1].startswith(key)]
    starts = [r for r in requests if r[0] == "POST"]
    chunks = [r for r in requests if r[0] == "PUT" and "upload_id=" in r[1]]
    assert [r for r in requests if r not in starts + chunks and r[0] != "DELETE"] == []
    assert len(starts) == 3 and all(r[2] == "201" and r[3] != "-" for r in starts)  # A, B, C
    assert all(r[3] != "-" for r in chunks)  # each chunk under its session's condition
    assert [r[2] for r in chunks].count("412") == 1  # A's last chunk
    assert [r[2] for r in chunks].count("200") == 2  # B's and C's
    assert open_sessions(server.endpoint(), BUCKET) == {}  # A's cancelled
    gdal.VSICurlClearCache()
    headers = gdal.GetFileMetadata(case.dst, "HEADERS")
    assert headers["ETag"] == f'"{c_output[2]}"'
    generation = headers["x-goog-generation"]
    run(warp_in_parts(case.source, case.dst, "K2"), env=case.env, check=True)
    gdal.VSICurlClearCache()
    assert gdal.GetFileMetadata(case.dst, "HEADERS")["x-goog-generation"] == generation  # skipped
    assert case.temp_dirs() == []


@pytest.fixture(scope="module")
def scene_200mb(tmp_path_factory):
    """An incompressible 8000 x 8400 x 3 Byte GeoTIFF (201.6 MB): a scene-sized COG."""
    import numpy as np
    path = tmp_path_factory.mktemp("scene200") / "scene.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(path), 8000, 8400, 3, gdal.GDT_Byte,
                                              ["TILED=YES"])
    ds.SetGeoTransform([500000.0, 1.0, 0, 4650000.0, 0, -1.0])
    srs = osr.SpatialReference()
    srs.ImportFromEPSG(32633)
    ds.SetProjection(srs.ExportToWkt())
    rng = np.random.default_rng(200)
    for b in range(1, 4):
        band = ds.GetRasterBand(b)
        for y in range(0, 8400, 1200):
            band.WriteArray(rng.integers(0, 256, (1200, 8000), dtype=np.uint8), 0, y)
    ds = None
    return str(path)


def cog_translate(src, dst, work):
    """The scene as an uncompressed COG with its overviews (about 290 MB): GDAL uploads it in
    parts of 50 MB."""
    return ["gdal_translate", "-q", "-of", "IDEM", "-co", "FORMAT=COG", "-co", "COMPRESS=NONE",
            "-mo", f"IDEM_TEST_WORK={work}", src, "/vsiidem/" + dst]


@pytest.mark.skipif(os.environ.get("IDEM_TEST_LARGE") == "NO",
                    reason="IDEM_TEST_LARGE=NO: the 200 MB upload runs where it is asked for")
@pytest.mark.whole_only
@pytest.mark.parametrize("store", [("moto", "AUTO")], indirect=True, ids=["moto"])
def test_zombie_200mb_cog_is_refused_at_its_completion(store, scene_200mb, tmp_path):
    """The case users meet: a scene-sized COG, always a multipart upload at GDAL's default
    VSIS3_CHUNK_SIZE (50 MB). A (K1) stops before its upload; B takes K1 over, C completes K2;
    A's CompleteMultipartUpload is refused (If-None-Match: *), C's object stays, recorded, and a
    rerun of K2 skips; on GDAL 3.10+ A's parts are aborted."""
    case = make_case(tmp_path, store, scene_200mb)
    key = case.dst[len(f"/vsis3/{BUCKET}/"):]
    returncode, stderr, c_etag = zombie_after_newer_work(case, cog_translate,
                                                         lambda: store_etag(case.dst))
    assert c_etag and re.fullmatch(r'"[0-9a-f]{32}-[4-9]"', c_etag), c_etag  # in parts
    assert returncode != 0, stderr
    assert store_etag(case.dst) == c_etag, "A's late upload replaced newer work"
    [k2] = completed(case, "K2")
    # Over 8 MB the ledger records the store's ETag, not a prediction (docs/object-storage.md).
    assert k2["output_etag"] == c_etag and k2["superseded_at"] is None
    assert k2["output_size"] == case.output()[0]
    if gdal_at_least("3.10"):
        assert multipart_uploads(store[0], key) == []
    run(cog_translate(case.source, case.dst, "K2"), env=case.env, check=True)
    assert store_etag(case.dst) == c_etag  # skipped


def assert_k1_recorded_as_plain_gdalwarp(case, output, server, tmp_path):
    """K1 completed, its row recording `output`, whose pixels (read through `server`) are those
    of plain gdalwarp."""
    [row] = completed(case, "K1")
    assert case.records(row, output)
    plain = tmp_path / "plain.tif"
    run(["gdalwarp", "-q", "-t_srs", "EPSG:3857", "-ts", "1500", "1500", "-r",
         RESAMPLING["K1"], case.source, str(plain)], check=True)
    with gdal_config(server.config()):
        assert (read_pixels(case.dst) == read_pixels(str(plain))).all()


@pytest.mark.parametrize("block_mib", [None, "1"], ids=["put-blob", "block-list"])
def test_azure_requests_are_sent_again_after_a_transient_failure(azurite, scene, tmp_path,
                                                                 block_mib):
    """IDEM's own Azure requests follow GDAL_HTTP_MAX_RETRY: a Put Blob, a Put Block or a Put
    Block List answered 503 (by a proxy in front of Azurite, which never sees it) is sent again,
    from the start of its bytes, and the blob ends whole: its Content-MD5 is the MD5 of its
    bytes, which a block hashed twice would break. Without retries the same fault fails the
    work, leaving no blob and no completion."""
    proxy = FaultProxy(azurite.port).start()
    try:
        via_proxy = types.SimpleNamespace(config=lambda: azure_config(
            f"http://127.0.0.1:{proxy.port}"))
        case = Case(tmp_path, "azure", via_proxy, scene)
        case.env.update(GDAL_HTTP_RETRY_DELAY="0.01")
        if block_mib:
            case.env["IDEM_AZURE_BLOCK_SIZE"] = block_mib

        def is_put_block(method, path):
            return method == "PUT" and "comp=block&" in path + "&"

        def is_put_block_list(method, path):
            return method == "PUT" and "comp=blocklist" in path

        def is_put_blob(method, path):
            return method == "PUT" and "comp=" not in path and "restype=" not in path

        proxy.fail(is_put_block if block_mib else is_put_blob, 1)
        failed = run(warp_in_parts(case.source, case.dst, "K1"),
                     env=dict(case.env, GDAL_HTTP_MAX_RETRY="0"))
        assert failed.returncode != 0 and proxy.faults_left() == 0
        with gdal_config(azurite.config()):
            assert case.output() is None
        assert completed(case, "K1") == []

        if block_mib:
            proxy.fail(is_put_block, 2).fail(is_put_block_list, 1)
        else:
            proxy.fail(is_put_blob, 2)
        run(warp_in_parts(case.source, case.dst, "K1"),
            env=dict(case.env, GDAL_HTTP_MAX_RETRY="3"), check=True)
        assert proxy.faults_left() == 0
        with gdal_config(azurite.config()):
            output = case.output()
            headers = gdal.GetFileMetadata(case.dst, "HEADERS")
            blob = case.dst.split(f"/vsiaz/{BUCKET}/", 1)[1]
            assert len(azurite.committed_blocks(BUCKET, blob)) == (7 if block_mib else 0)
        assert base64.b64decode(headers["content-md5"]).hex() == output[2]
        assert_k1_recorded_as_plain_gdalwarp(case, output, azurite, tmp_path)
    finally:
        proxy.stop()


def test_a_gcs_resumable_upload_goes_on_from_what_gcs_kept_after_a_transient_failure(
        gcs, scene, tmp_path):
    """IDEM's resumable upload to /vsigs/ follows GDAL_HTTP_MAX_RETRY: a chunk answered 503 (by
    a proxy in front of the GCS store) is followed by asking the session what it kept (itself
    answered 503 once here), then by the chunk again; a chunk the store kept but whose answer was
    lost is not sent again. The object ends whole: its MD5 (ETag, x-goog-hash) is that of the
    ledger's record and of its bytes, which a chunk sent or hashed twice would break. Without
    retries the same fault fails the work, leaving no object, no completion and no session."""
    from gcsserver import gcs_config, open_sessions
    proxy = FaultProxy(gcs.port).start()
    try:
        via_proxy = types.SimpleNamespace(config=lambda: gcs_config(
            f"http://127.0.0.1:{proxy.port}"))
        case = Case(tmp_path, "gcs", via_proxy, scene)
        case.env.update(GDAL_HTTP_RETRY_DELAY="0.01", IDEM_GCS_CHUNK_SIZE="1")

        def is_chunk(method, path):
            return method == "PUT" and "upload_id=" in path

        proxy.fail(is_chunk, 1)
        failed = run(warp_in_parts(case.source, case.dst, "K1"),
                     env=dict(case.env, GDAL_HTTP_MAX_RETRY="0"))
        assert failed.returncode != 0 and proxy.faults_left() == 0
        with gdal_config(gcs.config()):
            assert case.output() is None
        assert completed(case, "K1") == []
        assert open_sessions(gcs.endpoint(), BUCKET) == {}

        proxy.fail(is_chunk, 2).fail(is_chunk, 1, after_forwarding=True)
        mark = gcs.mark()
        run(warp_in_parts(case.source, case.dst, "K1"),
            env=dict(case.env, GDAL_HTTP_MAX_RETRY="3"), check=True)
        assert proxy.faults_left() == 0
        key = case.dst[len("/vsigs"):]
        chunks = [r for r in gcs.writes_since(mark) if r[1].startswith(key) and r[0] == "PUT"]
        # The store saw the first chunk twice (the second time kept, its answer lost), then
        # the status query, then each other chunk once: 7 chunks of the 6.75 MB.
        assert [r[2] for r in chunks] == ["308", "308", "308"] + ["308"] * 5 + ["200"], chunks
        with gdal_config(gcs.config()):
            output = case.output()
            headers = gdal.GetFileMetadata(case.dst, "HEADERS")
        assert headers["ETag"] == f'"{output[2]}"'
        assert (f"md5={base64.b64encode(bytes.fromhex(output[2])).decode()}"
                in headers["x-goog-hash"])
        assert_k1_recorded_as_plain_gdalwarp(case, output, gcs, tmp_path)
    finally:
        proxy.stop()


def test_a_gcs_session_at_another_host_is_not_followed(scene, tmp_path):
    """The bytes of IDEM's resumable upload go only where its request went: a store that names
    the session at another host (here one that does not listen) gets no chunk there; the work
    fails naming both origins, with no object and no completion."""
    server = GcsServer(tmp_path / "store", buckets=[BUCKET], session_host="127.0.0.1:9")
    (tmp_path / "store").mkdir()
    server.start()
    try:
        case = Case(tmp_path, "gcs", server, scene)
        case.env["IDEM_GCS_CHUNK_SIZE"] = "1"
        mark = server.mark()
        proc = run(warp_in_parts(case.source, case.dst, "K1"), env=case.env)
        assert proc.returncode != 0
        assert "named a session at http://127.0.0.1:9" in proc.stderr, proc.stderr
        assert f"not at the endpoint {server.endpoint()}" in proc.stderr
        key = case.dst[len("/vsigs"):]
        assert [r[0] for r in server.writes_since(mark) if r[1].startswith(key)] == ["POST"]
        with gdal_config(server.config()):
            assert case.output() is None
        assert completed(case, "K1") == []
    finally:
        server.stop()


def test_your_http_headers_reach_an_azure_blob_through_gdals_writer(azurite, scene, tmp_path):
    """While GDAL_HTTP_HEADERS is set, IDEM sends no Azure request of its own (they would drop
    the user's headers: an encryption scope, metadata): GDAL's writer uploads, carrying them.
    Here a metadata header reaches the blob; the work completes, recorded, and a rerun skips."""
    case = Case(tmp_path, "azure", azurite, scene)
    case.env["GDAL_HTTP_HEADERS"] = "x-ms-meta-owner: alice"
    run(warp(case.source, case.dst, "K1"), env=case.env, check=True)
    with gdal_config(azurite.config()):
        gdal.VSICurlClearCache()
        headers = gdal.GetFileMetadata(case.dst, "HEADERS")
        output = case.output()
    assert {k.lower(): v for k, v in headers.items()}.get("x-ms-meta-owner") == "alice"
    [row] = completed(case, "K1")
    assert case.records(row, output)
    run(warp(case.source, case.dst, "K1"), env=case.env, check=True)
    with gdal_config(azurite.config()):
        assert case.output() == output  # skipped: the same blob, the same ETag
