# SPDX-License-Identifier: MIT
"""The tests' GCS store (tools/gcs/serve_gcs.py) checked against what Google Cloud Storage's XML
API reference documents, since the fencing tests on /vsigs/ are only as good as the store they
run against: generations, x-goog-if-generation-match on writes, completions and deletes, ETags,
x-goog-hash, ranges and listings; and GDAL's /vsigs/ reading and writing through it."""

import base64
import os
import hashlib
import urllib.error
import urllib.request

import pytest
from osgeo import gdal

import gcsserver
from gcsserver import TEST_BEARER, TEST_HMAC
from idem_testlib import gdal_config

BUCKET = "idem-test"


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, "gcs-store", BUCKET)


def request(gcs, method, path, data=None, headers=None):
    """(status, headers, body) of one request to the store."""
    req = urllib.request.Request(gcs.endpoint() + path, data=data, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_each_write_makes_a_new_generation_and_preconditions_hold(gcs):
    key = f"/{BUCKET}/gen/a.bin"
    status, headers, _ = request(gcs, "PUT", key, b"one",
                                 {"x-goog-if-generation-match": "0"})  # no live object: 0 holds
    assert status == 200
    first = int(headers["x-goog-generation"])
    assert headers["ETag"] == '"%s"' % hashlib.md5(b"one").hexdigest()
    assert headers["x-goog-metageneration"] == "1"
    # 0 no longer holds once the object exists; a wrong generation never holds.
    for condition in ("0", str(first + 1)):
        status, _, body = request(gcs, "PUT", key, b"two",
                                  {"x-goog-if-generation-match": condition})
        assert status == 412 and b"PreconditionFailed" in body
    assert request(gcs, "GET", key)[2] == b"one"
    status, headers, _ = request(gcs, "PUT", key, b"two",
                                 {"x-goog-if-generation-match": str(first)})
    assert status == 200 and int(headers["x-goog-generation"]) > first
    second = headers["x-goog-generation"]
    # A delete on a stale generation is refused, on the live one carried out.
    assert request(gcs, "DELETE", key, headers={"x-goog-if-generation-match": str(first)})[0] == 412
    assert request(gcs, "GET", key)[2] == b"two"
    assert request(gcs, "DELETE", key, headers={"x-goog-if-generation-match": second})[0] == 204
    assert request(gcs, "GET", key)[0] == 404


def test_hashes_ranges_and_listings(gcs):
    data = b"123456789"
    assert request(gcs, "PUT", f"/{BUCKET}/list/x/a.txt", data)[0] == 200
    assert request(gcs, "PUT", f"/{BUCKET}/list/b.txt", b"b")[0] == 200
    status, headers, body = request(gcs, "GET", f"/{BUCKET}/list/x/a.txt",
                                    headers={"Range": "bytes=2-4"})
    assert status == 206 and body == b"345"
    assert headers["Content-Range"] == "bytes 2-4/9"
    hashes = dict(item.split("=", 1) for item in headers["x-goog-hash"].split(","))
    # CRC-32C of "123456789" is 0xE3069283 (RFC 3720's check value).
    assert base64.b64decode(hashes["crc32c"]) == bytes.fromhex("e3069283")
    assert base64.b64decode(hashes["md5"]) == hashlib.md5(data).digest()
    status, _, body = request(gcs, "GET", f"/{BUCKET}?prefix=list/&delimiter=/")
    assert status == 200
    assert b"<Key>list/b.txt</Key>" in body and b"<Prefix>list/x/</Prefix>" in body
    assert b"<Key>list/x/a.txt</Key>" not in body


def test_a_multipart_completion_takes_the_precondition(gcs):
    key = f"/{BUCKET}/parts/big.bin"
    request(gcs, "PUT", key, b"old")
    status, _, body = request(gcs, "POST", key + "?uploads", b"")
    upload_id = body.split(b"<UploadId>")[1].split(b"</UploadId>")[0].decode()
    parts = [b"a" * 10, b"b" * 5]
    for number, part in enumerate(parts, 1):
        assert request(gcs, "PUT", f"{key}?partNumber={number}&uploadId={upload_id}", part)[0] == 200
    complete = f"{key}?uploadId={upload_id}"
    assert request(gcs, "POST", complete, b"<CompleteMultipartUpload/>",
                   {"x-goog-if-generation-match": "0"})[0] == 412
    assert request(gcs, "GET", key)[2] == b"old"
    status, headers, _ = request(gcs, "POST", complete, b"<CompleteMultipartUpload/>")
    assert status == 200
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    assert headers["ETag"] == f'"{expected}-2"'
    assert "md5=" not in headers["x-goog-hash"]  # a composed object has no MD5
    assert request(gcs, "GET", key)[2] == b"".join(parts)


def test_gdal_reads_lists_and_writes_through_vsigs(gcs, tmp_path):
    with gdal_config(gcs.config()):
        uri = f"/vsigs/{BUCKET}/gdal/small.tif"
        ds = gdal.GetDriverByName("GTiff").Create(str(tmp_path / "small.tif"), 8, 8, 1)
        ds.GetRasterBand(1).Fill(7)
        ds = None
        gdal.Translate("/vsimem/copy.tif", str(tmp_path / "small.tif"))
        data = gdal.VSIFOpenL("/vsimem/copy.tif", "rb")
        content = gdal.VSIFReadL(1, 1 << 20, data)
        gdal.VSIFCloseL(data)
        gdal.Unlink("/vsimem/copy.tif")
        out = gdal.VSIFOpenL(uri, "wb")
        gdal.VSIFWriteL(content, 1, len(content), out)
        assert gdal.VSIFCloseL(out) == 0
        gdal.VSICurlClearCache()
        assert gdal.VSIStatL(uri).size == len(content)
        assert "small.tif" in gdal.ReadDir(f"/vsigs/{BUCKET}/gdal")
        assert gdal.Open(uri).GetRasterBand(1).Checksum() == \
            gdal.Open(str(tmp_path / "small.tif")).GetRasterBand(1).Checksum()
        headers = gdal.GetFileMetadata(uri, "HEADERS")
        assert int(headers["x-goog-generation"]) > 0


def test_a_source_reuploaded_with_the_same_bytes_keeps_its_key(gcs, tmp_path):
    """GCS's XML API gives an object written in one request its MD5 as ETag, so the key of a
    source on /vsigs/ follows its content: the same bytes uploaded again (a new generation) skip,
    other bytes rebuild."""
    from idem_testlib import GDAL_IDEM, env_with, make_source, run
    local = make_source(tmp_path / "scene.tif", size=64)
    with open(local, "rb") as f:
        content = f.read()
    uri = f"/vsigs/{BUCKET}/sources/scene.tif"
    ledger = tmp_path / "ledger.sqlite"
    out = tmp_path / "out.tif"
    env = env_with(IDEM_LEDGER=f"sqlite:{ledger}", **gcs.config())

    def upload(data):
        status, headers, _ = request(gcs, "PUT", uri[len("/vsigs"):], data)
        assert status == 200
        return headers["x-goog-generation"]

    def warp():
        run(["gdalwarp", "-q", "-overwrite", "-of", "IDEM", "-t_srs", "EPSG:4326", uri,
             "/vsiidem/" + str(out)], env=env,
            check=True)
        proc = run([GDAL_IDEM, "--ledger", f"sqlite:{ledger}", "--json", "status"])
        return __import__("json").loads(proc.stdout)["completed"], os.stat(out).st_mtime_ns

    first = upload(content)
    completed, mtime = warp()
    assert completed == 1
    assert upload(content) != first  # a new generation, the same bytes
    assert warp() == (1, mtime)      # skipped: the output untouched
    changed = bytearray(content)
    changed[-1] ^= 0xFF
    upload(bytes(changed))
    assert warp()[1] != mtime        # other bytes: a new work, published


def test_the_write_count_view_counts_what_landed(gcs):
    """The tests' one addition to the API: writes that landed per key, refused ones not."""
    from gcsserver import writes
    key = f"/{BUCKET}/counted/a.bin"
    assert request(gcs, "PUT", key, b"1")[0] == 200
    assert request(gcs, "PUT", key, b"1", {"x-goog-if-generation-match": "0"})[0] == 412
    assert request(gcs, "PUT", key, b"2")[0] == 200
    assert writes(gcs.endpoint(), BUCKET, "counted/") == {"counted/a.bin": 2}


def start_session(gcs, key, condition=None):
    """The URI of a resumable session started for `key` (with x-goog-if-generation-match)."""
    headers = {"x-goog-resumable": "start", "Content-Type": "application/octet-stream"}
    if condition is not None:
        headers["x-goog-if-generation-match"] = condition
    status, answer, _ = request(gcs, "POST", key, b"", headers)
    assert status == 201
    location = answer["Location"]
    assert "upload_id=" in location
    return location[len(gcs.endpoint()):]


def test_a_resumable_upload_is_conditional_when_it_is_finalized(gcs):
    """GCS's XML API resumable upload: the session is started by a POST carrying the
    precondition, which is not evaluated then; chunks but the last are multiples of 256 KiB and
    start where the kept bytes end (308 with Range until the total is reached); the chunk that
    completes the object is refused (412, the session ended) if the precondition no longer holds
    then, and otherwise makes a new generation whose ETag and x-goog-hash md5 are its MD5."""
    from gcsserver import open_sessions
    key = f"/{BUCKET}/resumable/a.bin"
    chunk = 256 << 10
    data = os.urandom(2 * chunk + 1000)
    total = str(len(data))
    session = start_session(gcs, key, "0")
    assert open_sessions(gcs.endpoint(), BUCKET) == {"resumable/a.bin": 1}
    assert request(gcs, "PUT", session, b"", {"Content-Range": f"bytes */{total}"})[0] == 308
    status, headers, _ = request(gcs, "PUT", session, data[:chunk],
                                 {"Content-Range": f"bytes 0-{chunk - 1}/{total}"})
    assert status == 308 and headers["Range"] == f"bytes=0-{chunk - 1}"
    # Not a multiple of 256 KiB, or not where the kept bytes end: refused, nothing kept.
    assert request(gcs, "PUT", session, data[chunk:chunk + 1000],
                   {"Content-Range": f"bytes {chunk}-{chunk + 999}/*"})[0] == 400
    assert request(gcs, "PUT", session, data[:chunk],
                   {"Content-Range": f"bytes 0-{chunk - 1}/{total}"})[0] == 400
    status, headers, _ = request(gcs, "PUT", session, b"", {"Content-Range": f"bytes */{total}"})
    assert status == 308 and headers["Range"] == f"bytes=0-{chunk - 1}"
    # Another writer makes the object meanwhile: the last chunk is refused, the session ends.
    assert request(gcs, "PUT", key, b"other")[0] == 200
    status, _, _ = request(gcs, "PUT", session, data[chunk:],
                           {"Content-Range": f"bytes {chunk}-{len(data) - 1}/{total}"})
    assert status == 412
    assert request(gcs, "GET", key)[2] == b"other"
    assert open_sessions(gcs.endpoint(), BUCKET) == {}
    # With the generation in place: kept, and the object is the session's bytes.
    generation = request(gcs, "HEAD", key)[1]["x-goog-generation"]
    session = start_session(gcs, key, generation)
    assert request(gcs, "PUT", session, data[:2 * chunk],
                   {"Content-Range": f"bytes 0-{2 * chunk - 1}/*"})[0] == 308
    status, headers, _ = request(gcs, "PUT", session, data[2 * chunk:],
                                 {"Content-Range": f"bytes {2 * chunk}-{len(data) - 1}/{total}"})
    assert status == 200 and int(headers["x-goog-generation"]) > int(generation)
    assert headers["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
    assert f"md5={base64.b64encode(hashlib.md5(data).digest()).decode()}" in headers["x-goog-hash"]
    assert request(gcs, "GET", key)[2] == data
    # A session cancelled by a DELETE of its URI (499) leaves no object and no session.
    session = start_session(gcs, f"/{BUCKET}/resumable/b.bin")
    assert request(gcs, "DELETE", session)[0] == 499
    assert request(gcs, "PUT", session, b"x", {"Content-Range": "bytes 0-0/1"})[0] == 404
    assert request(gcs, "HEAD", f"/{BUCKET}/resumable/b.bin")[0] == 404
    assert open_sessions(gcs.endpoint(), BUCKET) == {}


@pytest.fixture(scope="module")
def gcs_hmac(tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, "gcs-hmac", BUCKET, hmac=TEST_HMAC)


def test_with_an_hmac_key_gdal_signs_every_request_as_the_store_checks(gcs_hmac, tmp_path):
    """The store started with an HMAC key checks each request's GOOG1 signature as GCS's XML
    API documents it. GDAL's /vsigs/ (whose signing works against real GCS) writes, stats,
    lists, reads and deletes through it, so the store checks signatures as GCS does; a wrong
    secret and an unsigned request are refused (403)."""
    local = tmp_path / "small.tif"
    ds = gdal.GetDriverByName("GTiff").Create(str(local), 8, 8, 1)
    ds.GetRasterBand(1).Fill(9)
    ds = None
    uri = f"/vsigs/{BUCKET}/signed/dir/small.tif"
    content = local.read_bytes()

    def upload():
        out = gdal.VSIFOpenL(uri, "wb")
        gdal.VSIFWriteL(content, 1, len(content), out)
        return gdal.VSIFCloseL(out)

    with gdal_config(gcs_hmac.config()):
        assert upload() == 0
        gdal.VSICurlClearCache()
        assert gdal.VSIStatL(uri).size == local.stat().st_size
        assert gdal.ReadDir(f"/vsigs/{BUCKET}/signed/dir") == ["small.tif"]
        assert gdal.Open(uri).GetRasterBand(1).Checksum() == \
            gdal.Open(str(local)).GetRasterBand(1).Checksum()
        assert gdal.Unlink(uri) == 0
        gdal.VSICurlClearCache()
        assert gdal.VSIStatL(uri) is None
    wrong = dict(gcs_hmac.config(), GS_SECRET_ACCESS_KEY="not" + TEST_HMAC[1])
    with gdal_config(wrong):
        gdal.VSICurlClearCache()
        with _quiet():
            try:
                refused = upload() != 0
            except RuntimeError:  # GDAL's Python exceptions on
                refused = True
            assert refused
    assert request(gcs_hmac, "PUT", f"/{BUCKET}/signed/x.bin", b"x")[0] == 403
    assert request(gcs_hmac, "GET", f"/{BUCKET}/signed/dir/small.tif")[0] == 403


class _quiet:
    def __enter__(self):
        gdal.PushErrorHandler("CPLQuietErrorHandler")

    def __exit__(self, *exc):
        gdal.PopErrorHandler()


def write_read_delete(uri, content):
    """GDAL writes `content` at `uri`, reads it back (not from its cache) and deletes it."""
    out = gdal.VSIFOpenL(uri, "wb")
    gdal.VSIFWriteL(content, 1, len(content), out)
    assert gdal.VSIFCloseL(out) == 0
    gdal.VSICurlClearCache()
    f = gdal.VSIFOpenL(uri, "rb")
    assert gdal.VSIFReadL(1, len(content) + 1, f) == content
    gdal.VSIFCloseL(f)
    assert gdal.Unlink(uri) == 0


@pytest.fixture(scope="module")
def gcs_bearer(tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, "gcs-bearer", BUCKET, bearer=TEST_BEARER)


def test_on_a_compute_engine_machine_gdal_signs_with_the_metadata_servers_token(gcs_bearer,
                                                                               tmp_path):
    """The store started with a bearer token serves it as a Compute Engine machine's metadata
    server does (only to a request with Metadata-Flavor: Google) and refuses requests without
    it (403). GDAL, told the machine may be on Compute Engine and where its metadata server is
    (CPL_GCE_CHECK_LOCAL_FILES=NO, CPL_GCE_CREDENTIALS_URL), writes, reads and deletes through
    it: with no other credentials, GDAL signs with that token."""
    content = os.urandom(1000)
    uri = f"/vsigs/{BUCKET}/gce/a.bin"
    token_path = "/computeMetadata/v1/instance/service-accounts/default/token"
    assert request(gcs_bearer, "GET", token_path)[0] == 403
    status, _, body = request(gcs_bearer, "GET", token_path, headers={"Metadata-Flavor": "Google"})
    assert status == 200 and __import__("json").loads(body)["access_token"] == gcs_bearer.bearer
    with gdal_config(gcs_bearer.config()):
        write_read_delete(uri, content)
    assert request(gcs_bearer, "PUT", f"/{BUCKET}/gce/b.bin", b"x")[0] == 403
    assert request(gcs_bearer, "PUT", f"/{BUCKET}/gce/b.bin", b"x",
                   {"Authorization": "Bearer " + gcs_bearer.bearer})[0] == 200


@pytest.fixture(scope="module", params=["refresh", "service_account"])
def gcs_oauth(request, tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, f"gcs-{request.param}", BUCKET,
                                 oauth=request.param)


def _jwt(key, claims):
    """An RS256 JWT of `claims` signed with `key` (a cryptography RSA private key)."""
    import json
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    signed = b64(b'{"alg":"RS256","typ":"JWT"}') + "." + b64(json.dumps(claims).encode())
    return signed + "." + b64(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256()))


def test_gdal_signs_with_the_oauth2_token_its_credentials_get(gcs_oauth):
    """The store started with an OAuth2 grant gives its token as Google's token endpoint does:
    for the refresh token and client it knows (GS_OAUTH2_REFRESH_TOKEN with
    GS_OAUTH2_CLIENT_ID/SECRET), or for an RS256 JWT that the service account's key signed, for
    this endpoint (GOOGLE_APPLICATION_CREDENTIALS naming the account's JSON key); anything else
    is refused (400 invalid_grant). GDAL, pointed at the endpoint (GOA2_AUTH_URL_TOKEN, GO2A_AUD),
    writes, reads and deletes with the token it gets; a request without it is refused (403)."""
    import json
    import time
    import urllib.parse
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    content = os.urandom(1000)
    uri = f"/vsigs/{BUCKET}/oauth/a.bin"
    with gdal_config(gcs_oauth.config()):
        write_read_delete(uri, content)
    assert request(gcs_oauth, "PUT", f"/{BUCKET}/oauth/b.bin", b"x")[0] == 403

    def token(form):
        status, _, body = request(gcs_oauth, "POST", "/token",
                                  urllib.parse.urlencode(form).encode(),
                                  {"Content-Type": "application/x-www-form-urlencoded"})
        return status, json.loads(body)

    refresh, client, secret = gcsserver.TEST_REFRESH
    grant = {"grant_type": "refresh_token", "refresh_token": refresh, "client_id": client,
             "client_secret": secret}
    jwt_grant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    if gcs_oauth.oauth == "refresh":
        assert token(grant) == (200, {"access_token": TEST_BEARER, "expires_in": 3599,
                                      "token_type": "Bearer"})
        assert token(dict(grant, client_secret="other"))[0] == 400
        assert token(dict(grant, refresh_token="1//other"))[0] == 400
        return
    assert token(grant)[0] == 400  # this store takes the service account's grant only
    with open(gcs_oauth.key_file) as key_file:
        key = serialization.load_pem_private_key(json.load(key_file)["private_key"].encode(),
                                                 None)
    claims = {"iss": gcsserver.TEST_SERVICE_ACCOUNT, "scope": "s",
              "aud": gcs_oauth.endpoint() + "/token", "iat": int(time.time()),
              "exp": int(time.time()) + 600}
    assert token({"grant_type": jwt_grant, "assertion": _jwt(key, claims)})[0] == 200
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    for refused in (_jwt(other_key, claims),  # another key's signature
                    _jwt(key, dict(claims, iss="other@p.iam.gserviceaccount.com")),
                    _jwt(key, dict(claims, aud="https://oauth2.googleapis.com/token")),
                    _jwt(key, dict(claims, exp=int(time.time()) - 1)),
                    "not.a.jwt"):
        assert token({"grant_type": jwt_grant, "assertion": refused})[0] == 400


@pytest.fixture(scope="module")
def gcs_requester_pays(tmp_path_factory):
    yield from gcsserver.started(tmp_path_factory, "gcs-requester-pays", BUCKET, hmac=TEST_HMAC,
                                 user_project=gcsserver.TEST_USER_PROJECT)


def test_a_requester_pays_bucket_takes_requests_that_name_a_project(gcs_requester_pays):
    """A bucket started with --user-project answers 400 UserProjectMissing to a request that does
    not name the project (as GCS does for a requester-pays bucket); GDAL with GS_USER_PROJECT
    names it on each request (signed with the HMAC key) and writes, reads and deletes."""
    content = os.urandom(1000)
    uri = f"/vsigs/{BUCKET}/pays/a.bin"
    config = gcs_requester_pays.config()
    with gdal_config(config):
        write_read_delete(uri, content)
    del config["GS_USER_PROJECT"]
    with gdal_config(config), _quiet():
        gdal.VSICurlClearCache()
        try:
            out = gdal.VSIFOpenL(uri, "wb")
            gdal.VSIFWriteL(content, 1, len(content), out)
            refused = gdal.VSIFCloseL(out) != 0
        except RuntimeError:  # GDAL's Python exceptions on
            refused = True
        assert refused
    status, _, body = request(gcs_requester_pays, "GET", f"/{BUCKET}/pays/a.bin")
    assert status == 400 and b"UserProjectMissing" in body
