# SPDX-License-Identifier: MIT
"""A Google Cloud Storage store on loopback for the tests: the part of GCS's XML API that GDAL's
/vsigs/ uses (objects, listings, multipart uploads), with GCS's documented object generations
and preconditions, which the emulators on PyPI and the Go proxy do not implement
(docs/object-storage.md, "GCS").

What it follows, from GCS's XML API reference:
- every write of an object makes a new generation (a number that only grows), sent back as
  `x-goog-generation`, with `x-goog-metageneration: 1`;
- `x-goog-if-generation-match: G` on a PUT, a multipart completion or a DELETE: the request is
  carried out only when the object's live generation is G, and with G = 0 only when there is no
  live object; otherwise 412 PreconditionFailed and nothing changes;
- the ETag of an object written in one request is its MD5 in hex, quoted; of one assembled from
  parts, the MD5 of the parts' MD5s and the part count (not the content's MD5);
- `x-goog-hash: crc32c=<base64>,md5=<base64>` (md5 only for objects written in one request);
- GET with `Range`, HEAD, and bucket listings in the S3-compatible ListBucketResult form;
- resumable uploads: `POST` with `x-goog-resumable: start` answers 201 with the session's URI
  (`Location`, with `upload_id`); `PUT` to it with `Content-Range: bytes A-B/TOTAL` (or `*` for
  a total not yet known) appends the chunk, which must start where the kept bytes end and, but
  for the last, be a multiple of 256 KiB; `bytes */TOTAL` asks what was kept. Until the total is
  reached the answer is 308 with `Range: bytes=0-N` (none while nothing is kept); the request
  that reaches it finalizes the object, with its MD5 as ETag, and only if the precondition given
  when the session was started holds then (GCS evaluates it at finalization, not at the start):
  else 412, and the session ends. `DELETE` of the session's URI cancels it (499);
- with `--bearer TOKEN`, every request but those to a session's URI must carry `Authorization:
  Bearer TOKEN`, which the store gives as the Compute Engine metadata server does (`GET
  /computeMetadata/v1/instance/service-accounts/default/token` with `Metadata-Flavor: Google`);
- with `--bearer TOKEN` and `--oauth-refresh REFRESH_TOKEN:CLIENT_ID:CLIENT_SECRET`, the store
  also gives the token as Google's OAuth2 token endpoint does for a refresh token (`POST /token`,
  form `grant_type=refresh_token&refresh_token=...&client_id=...&client_secret=...`, answered
  `{"access_token", "expires_in", "token_type"}`, or 400 `{"error": "invalid_grant"}` for other
  values); with `--service-account EMAIL:MODULUS` (hex, exponent 65537), for a service account's
  signed JWT (`grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=JWT`: an RS256
  JWT whose signature the key's modulus verifies, `iss` the account's email, `aud` the token
  endpoint's URL, a `scope`, and an `exp` not past);
- with `--user-project PROJECT` the bucket is a requester-pays one: every request but those to a
  session's URI must carry `x-goog-user-project: PROJECT` (else 400 UserProjectMissing);
- with `--hmac ACCESS_KEY:SECRET`, every request but those to a session's URI must be signed as
  GCS's XML API documents for HMAC keys and GDAL's /vsigs/ signs: `Authorization: GOOG1
  ACCESS_KEY:base64(HMAC-SHA1(SECRET, VERB\nContent-MD5\nContent-Type\nDate\n` + the x-goog-
  headers, lower-case `name:value\n`, sorted + the path))`; otherwise 403 SignatureDoesNotMatch.

Started as `python3 serve_gcs.py [--address ADDR] [--hmac KEY:SECRET | --bearer TOKEN
[--oauth-refresh R:ID:SECRET] [--service-account EMAIL:MODULUS]] [--user-project PROJECT]
[--session-host HOST]
PORT LOG BUCKET...` (`--session-host`: sessions are handed out at that host, not the one asked,
for a test that a client does not follow them elsewhere) (PORT 0 picks one;
ADDR defaults to 127.0.0.1): prints "listening PORT", logs "METHOD PATH STATUS CONDITION" per
request to LOG (CONDITION: the request's x-goog-if-generation-match, or "-"), stops when stdin
closes.

One addition for the tests, outside GCS's API: `GET /_idem/writes/BUCKET?prefix=P` answers a
JSON object {key: number of writes that landed at it (uploads and completions)}, which tells a
test that an upload it expects to be refused left nothing, even if its bytes equal the ones in
place. `GET /_idem/sessions/BUCKET` answers {key: resumable sessions open}, which tells a test
that an upload left no session behind.
Standard library only."""

import base64
import hashlib
import hmac
import http.server
import itertools
import json
import sys
import threading
import time
import urllib.parse
import uuid
from xml.sax.saxutils import escape

LOCK = threading.Lock()
WRITES = {}  # (bucket, key) -> writes that landed there
BUCKETS = {}  # name -> {key: object}
UPLOADS = {}  # upload id -> {"bucket", "key", "parts": {number: bytes}}
SESSIONS = {}  # resumable upload id -> {"bucket", "key", "condition", "chunks", "kept"}
HMAC_KEY = None  # (access key, secret) when requests must be signed
BEARER = None  # the access token requests must carry, which the metadata server gives
TOKEN_PATH = "/computeMetadata/v1/instance/service-accounts/default/token"
OAUTH_PATH = "/token"  # the OAuth2 token endpoint's
OAUTH_REFRESH = None  # (refresh token, client id, client secret) the token endpoint takes
SERVICE_ACCOUNT = None  # (email, RSA modulus) whose signed JWTs the token endpoint takes
USER_PROJECT = None  # the project every request must name (a requester-pays bucket)
SESSION_HOST = None  # the host sessions are handed out at, for a test (else the request's)
CHUNK_MULTIPLE = 256 << 10
GENERATIONS = itertools.count(int(time.time() * 1_000_000))
LOG = None


def crc32c(data):
    """CRC-32C (Castagnoli), as GCS computes it."""
    table = crc32c.table
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    crc32c.table.append(_c)

CRC32C_LIMIT = 8 << 20  # larger objects are sent without crc32c (pure Python would be slow)


def make_object(data, etag, with_md5):
    obj = {"data": data, "generation": next(GENERATIONS), "etag": etag,
           "updated": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())}
    hashes = []
    if len(data) <= CRC32C_LIMIT:
        hashes.append("crc32c=" + base64.b64encode(crc32c(data).to_bytes(4, "big")).decode())
    if with_md5:
        hashes.append("md5=" + base64.b64encode(hashlib.md5(data).digest()).decode())
    obj["hash"] = ",".join(hashes)
    return obj


def error_xml(code, message):
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{escape(message)}</Message></Error>").encode()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def answer(self, status, payload=b"", headers=None, head=False):
        # Logged before the answer is sent: a client that has its answer finds its request in
        # the log (a test reads it as soon as its command returns).
        condition = self.headers.get("x-goog-if-generation-match") or getattr(
            self, "session_condition", None) or "-"
        with open(LOG, "a") as log:
            log.write(f"{self.command} {self.path} {status} {condition}\n")
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if payload and not head:
            self.wfile.write(payload)

    def target(self):
        parsed = urllib.parse.urlsplit(self.path)
        parts = parsed.path.lstrip("/").split("/", 1)
        bucket = urllib.parse.unquote(parts[0])
        key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
        return bucket, key, dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))

    def signature_fails(self, head=False):
        """With --hmac, whether the request is not signed with the key as GCS's XML API
        documents; with --bearer, whether it does not carry the token (then answered 403
        here). Requests to a resumable session's URI are not signed: the session's URI is its
        credential."""
        parsed = urllib.parse.urlsplit(self.path)
        if ("upload_id" in urllib.parse.parse_qs(parsed.query) or parsed.path.startswith("/_idem/")
                or parsed.path in (TOKEN_PATH, OAUTH_PATH)):
            return False
        if USER_PROJECT is not None and self.headers.get("x-goog-user-project") != USER_PROJECT:
            self.body()  # read before answering
            self.answer(400, error_xml("UserProjectMissing", "Bucket is a requester pays bucket "
                                       "but no user project provided."),
                        {"Content-Type": "application/xml"}, head=head)
            return True
        if HMAC_KEY is None and BEARER is None:
            return False
        if BEARER is not None:
            if self.headers.get("Authorization", "") == f"Bearer {BEARER}":
                return False
            return self.refuse_signature(head)
        goog = {}
        for name, value in self.headers.items():
            if name.lower().startswith("x-goog-"):
                goog.setdefault(name.lower(), []).append(value.strip())
        canonical = "".join(f"{name}:{','.join(goog[name])}\n" for name in sorted(goog))
        signed = (f"{self.command}\n{self.headers.get('Content-MD5', '')}\n"
                  f"{self.headers.get('Content-Type', '')}\n{self.headers.get('Date', '')}\n"
                  f"{canonical}")
        access, secret = HMAC_KEY
        given = self.headers.get("Authorization", "")
        for resource in {parsed.path, parsed.path.rstrip("/")}:
            digest = hmac.new(secret.encode(), (signed + resource).encode(), "sha1").digest()
            if hmac.compare_digest(given, f"GOOG1 {access}:{base64.b64encode(digest).decode()}"):
                return False
        return self.refuse_signature(head)

    def refuse_signature(self, head):
        self.body()  # read before answering
        self.answer(403, error_xml("SignatureDoesNotMatch", "The request signature we "
                                   "calculated does not match the signature you provided."),
                    {"Content-Type": "application/xml"}, head=head)
        return True

    def precondition_fails(self, current, wanted=None):
        """GCS's x-goog-if-generation-match (or `wanted`, a session's) against the live object
        `current` (or None)."""
        if wanted is None:
            wanted = self.headers.get("x-goog-if-generation-match")
        if wanted is None:
            return False
        live = current["generation"] if current is not None else 0
        return int(wanted) != live

    def refuse_precondition(self):
        self.answer(412, error_xml("PreconditionFailed", "At least one of the pre-conditions "
                                   "you specified did not hold."),
                    {"Content-Type": "application/xml"})

    def object_headers(self, obj):
        return {"ETag": obj["etag"], "x-goog-generation": str(obj["generation"]),
                "x-goog-metageneration": "1", "x-goog-hash": obj["hash"],
                "x-goog-stored-content-length": str(len(obj["data"])),
                "Last-Modified": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime()),
                "Content-Type": "application/octet-stream"}

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head=False):
        if self.signature_fails(head):
            return
        if urllib.parse.urlsplit(self.path).path == TOKEN_PATH and BEARER is not None:
            # The Compute Engine metadata server's token, given only to a request that says it
            # asks the metadata server (Metadata-Flavor: Google), as the real one does.
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.answer(403, b"Missing Metadata-Flavor:Google header.", head=head)
            token = {"access_token": BEARER, "expires_in": 3599, "token_type": "Bearer"}
            return self.answer(200, json.dumps(token).encode(),
                               {"Content-Type": "application/json",
                                "Metadata-Flavor": "Google"}, head=head)
        bucket, key, query = self.target()
        if bucket == "_idem" and key.startswith("sessions/"):
            wanted = key[len("sessions/"):]
            with LOCK:
                counts = {}
                for session in SESSIONS.values():
                    if session["bucket"] == wanted:
                        counts[session["key"]] = counts.get(session["key"], 0) + 1
            return self.answer(200, json.dumps(counts).encode(),
                               {"Content-Type": "application/json"}, head=head)
        if bucket == "_idem" and key.startswith("writes/"):
            wanted, prefix = key[len("writes/"):], query.get("prefix", "")
            with LOCK:
                counts = {k: n for (b, k), n in WRITES.items()
                          if b == wanted and k.startswith(prefix)}
            return self.answer(200, json.dumps(counts).encode(),
                               {"Content-Type": "application/json"}, head=head)
        with LOCK:
            objects = BUCKETS.get(bucket)
            if objects is None:
                return self.answer(404, error_xml("NoSuchBucket", bucket), head=head)
            if not key:
                return self.list(bucket, objects, query, head)
            obj = objects.get(key)
            if obj is None:
                return self.answer(404, error_xml("NoSuchKey", key),
                                   {"Content-Type": "application/xml"}, head=head)
            if self.precondition_fails(obj):
                return self.refuse_precondition()
            data = obj["data"]
            headers = self.object_headers(obj)
        ranged = self.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes="):].partition("-")
            first = int(first)
            last = min(int(last) if last else len(data) - 1, len(data) - 1)
            if first >= len(data):
                return self.answer(416, error_xml("InvalidRange", ranged), head=head)
            headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
            headers["Content-Length"] = str(last - first + 1)
            return self.answer(206, data[first:last + 1], headers, head=head)
        headers["Content-Length"] = str(len(data))
        return self.answer(200, data, headers, head=head)

    def list(self, bucket, objects, query, head):
        prefix = query.get("prefix", "")
        delimiter = query.get("delimiter", "")
        marker = query.get("marker", "")
        contents, prefixes = [], set()
        for key in sorted(objects):
            if not key.startswith(prefix) or (marker and key <= marker):
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                continue
            obj = objects[key]
            contents.append(f"<Contents><Key>{escape(key)}</Key>"
                            f"<Generation>{obj['generation']}</Generation>"
                            f"<LastModified>{obj['updated']}</LastModified>"
                            f"<ETag>{escape(obj['etag'])}</ETag>"
                            f"<Size>{len(obj['data'])}</Size></Contents>")
        xml = ("<?xml version='1.0' encoding='UTF-8'?>"
               "<ListBucketResult xmlns='http://doc.s3.amazonaws.com/2006-03-01'>"
               f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
               f"<Marker>{escape(marker)}</Marker><IsTruncated>false</IsTruncated>"
               + "".join(contents)
               + "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>"
                         for p in sorted(prefixes))
               + "</ListBucketResult>").encode()
        return self.answer(200, xml, {"Content-Type": "application/xml"}, head=head)

    def resumable_chunk(self, objects, key, query, data):
        """A PUT to a resumable session's URI (under LOCK)."""
        session = SESSIONS.get(query["upload_id"])
        if session is None or session["key"] != key:
            return self.answer(404, error_xml("NoSuchUpload", query["upload_id"]))
        self.session_condition = session["condition"]
        kept = session["kept"]
        content_range = self.headers.get("Content-Range", "")
        if not content_range.startswith("bytes ") or "/" not in content_range:
            return self.answer(400, error_xml("InvalidArgument", "Content-Range: " + content_range))
        span, _, total = content_range[len("bytes "):].partition("/")
        total = None if total == "*" else int(total)
        if span != "*":
            first, _, last = span.partition("-")
            first, last = int(first), int(last)
            if first != kept or last - first + 1 != len(data):
                return self.answer(400, error_xml("InvalidArgument", "the chunk must start at "
                                                  f"byte {kept} and hold its range"))
            if (total is None or last + 1 < total) and len(data) % CHUNK_MULTIPLE:
                return self.answer(400, error_xml("InvalidArgument", "a chunk but the last "
                                                  "must be a multiple of 256 KiB"))
            session["chunks"].append(data)
            kept = session["kept"] = kept + len(data)
        if total is None or kept < total:
            headers = {"Range": f"bytes=0-{kept - 1}"} if kept else {}
            return self.answer(308, b"", headers)
        if kept > total:
            return self.answer(400, error_xml("InvalidArgument", "more bytes than the total"))
        del SESSIONS[query["upload_id"]]
        if self.precondition_fails(objects.get(key), session["condition"]):
            return self.refuse_precondition()
        data = b"".join(session["chunks"])
        obj = make_object(data, f'"{hashlib.md5(data).hexdigest()}"', True)
        objects[key] = obj
        WRITES[session["bucket"], key] = WRITES.get((session["bucket"], key), 0) + 1
        return self.answer(200, b"", self.object_headers(obj))

    def do_PUT(self):
        if self.signature_fails():
            return
        bucket, key, query = self.target()
        data = self.body()
        with LOCK:
            if not key:
                BUCKETS.setdefault(bucket, {})
                return self.answer(200)
            objects = BUCKETS.get(bucket)
            if objects is None:
                return self.answer(404, error_xml("NoSuchBucket", bucket))
            if "upload_id" in query:
                return self.resumable_chunk(objects, key, query, data)
            if "uploadId" in query:
                upload = UPLOADS.get(query["uploadId"])
                if upload is None:
                    return self.answer(404, error_xml("NoSuchUpload", query["uploadId"]))
                upload["parts"][int(query["partNumber"])] = data
                return self.answer(200, b"", {"ETag": f'"{hashlib.md5(data).hexdigest()}"'})
            if self.precondition_fails(objects.get(key)):
                return self.refuse_precondition()
            obj = make_object(data, f'"{hashlib.md5(data).hexdigest()}"', True)
            objects[key] = obj
            WRITES[bucket, key] = WRITES.get((bucket, key), 0) + 1
            return self.answer(200, b"", self.object_headers(obj))

    def oauth_token(self):
        """Google's OAuth2 token endpoint, for a refresh token or a service account's JWT."""
        form = dict(urllib.parse.parse_qsl(self.body().decode()))
        grant = form.get("grant_type")
        if grant == "refresh_token" and OAUTH_REFRESH is not None:
            granted = (form.get("refresh_token"), form.get("client_id"),
                       form.get("client_secret")) == OAUTH_REFRESH
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer" and SERVICE_ACCOUNT:
            granted = self.jwt_holds(form.get("assertion", ""))
        else:
            granted = False
        if not granted:
            return self.answer(400, json.dumps({"error": "invalid_grant"}).encode(),
                               {"Content-Type": "application/json"})
        token = {"access_token": BEARER, "expires_in": 3599, "token_type": "Bearer"}
        return self.answer(200, json.dumps(token).encode(), {"Content-Type": "application/json"})

    def jwt_holds(self, assertion):
        """Whether `assertion` is a JWT signed with RS256 by the service account's key (RSASSA-
        PKCS1-v1_5 with SHA-256: the signature to the power 65537 modulo the key's modulus is
        the padded DER DigestInfo of the SHA-256 of "header.claims") for this endpoint."""
        def decode(part):
            part = part.replace("-", "+").replace("_", "/")
            return base64.b64decode(part + "=" * (-len(part) % 4))
        try:
            header, claims, signature = assertion.split(".")
            if json.loads(decode(header)).get("alg") != "RS256":
                return False
            claims_json = json.loads(decode(claims))
            email, modulus = SERVICE_ACCOUNT
            size = (modulus.bit_length() + 7) // 8
            got = pow(int.from_bytes(decode(signature), "big"), 65537, modulus)
            digest = hashlib.sha256(f"{header}.{claims}".encode()).digest()
            info = bytes.fromhex("3031300d060960864801650304020105000420") + digest
            wanted = b"\x00\x01" + b"\xff" * (size - len(info) - 3) + b"\x00" + info
            endpoint = f"http://{self.headers.get('Host')}{OAUTH_PATH}"
            return (got.to_bytes(size, "big") == wanted and claims_json.get("iss") == email
                    and claims_json.get("aud") == endpoint and claims_json.get("scope")
                    and claims_json.get("exp", 0) > time.time())
        except (ValueError, TypeError, AttributeError):
            return False

    def do_POST(self):
        if urllib.parse.urlsplit(self.path).path == OAUTH_PATH and BEARER is not None:
            return self.oauth_token()
        if self.signature_fails():
            return
        bucket, key, query = self.target()
        data = self.body()
        with LOCK:
            objects = BUCKETS.get(bucket)
            if objects is None:
                return self.answer(404, error_xml("NoSuchBucket", bucket))
            if self.headers.get("x-goog-resumable") == "start" and key:
                # The precondition is kept for the finalization; it is not evaluated here.
                upload_id = uuid.uuid4().hex
                SESSIONS[upload_id] = {"bucket": bucket, "key": key, "chunks": [], "kept": 0,
                                       "condition": self.headers.get("x-goog-if-generation-match")}
                # The host the client asked (a proxy's, when one passed it on).
                host = (SESSION_HOST or self.headers.get("X-Forwarded-Host")
                        or self.headers.get("Host"))
                location = (f"http://{host}/{urllib.parse.quote(bucket)}/"
                            f"{urllib.parse.quote(key)}?upload_id={upload_id}")
                return self.answer(201, b"", {"Location": location})
            if "uploads" in query:
                upload_id = uuid.uuid4().hex
                UPLOADS[upload_id] = {"bucket": bucket, "key": key, "parts": {}}
                xml = ("<?xml version='1.0' encoding='UTF-8'?><InitiateMultipartUploadResult>"
                       f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>"
                       f"<UploadId>{upload_id}</UploadId></InitiateMultipartUploadResult>")
                return self.answer(200, xml.encode(), {"Content-Type": "application/xml"})
            if "uploadId" in query:
                upload = UPLOADS.get(query["uploadId"])
                if upload is None:
                    return self.answer(404, error_xml("NoSuchUpload", query["uploadId"]))
                if self.precondition_fails(objects.get(key)):
                    return self.refuse_precondition()  # the upload stays, to be aborted
                del UPLOADS[query["uploadId"]]
                numbers = sorted(upload["parts"])
                digest = hashlib.md5(b"".join(hashlib.md5(upload["parts"][n]).digest()
                                              for n in numbers)).hexdigest()
                obj = make_object(b"".join(upload["parts"][n] for n in numbers),
                                  f'"{digest}-{len(numbers)}"', False)
                objects[key] = obj
                WRITES[bucket, key] = WRITES.get((bucket, key), 0) + 1
                xml = ("<?xml version='1.0' encoding='UTF-8'?><CompleteMultipartUploadResult>"
                       f"<Bucket>{escape(bucket)}</Bucket><Key>{escape(key)}</Key>"
                       f"<ETag>{escape(obj['etag'])}</ETag></CompleteMultipartUploadResult>")
                headers = self.object_headers(obj)
                headers["Content-Type"] = "application/xml"
                return self.answer(200, xml.encode(), headers)
        return self.answer(400, error_xml("InvalidArgument", self.path))

    def do_DELETE(self):
        if self.signature_fails():
            return
        bucket, key, query = self.target()
        with LOCK:
            objects = BUCKETS.get(bucket)
            if objects is None:
                return self.answer(404, error_xml("NoSuchBucket", bucket))
            if "upload_id" in query:
                if SESSIONS.pop(query["upload_id"], None) is None:
                    return self.answer(404, error_xml("NoSuchUpload", query["upload_id"]))
                return self.answer(499)
            if "uploadId" in query:
                UPLOADS.pop(query["uploadId"], None)
                return self.answer(204)
            obj = objects.get(key)
            if obj is None:
                return self.answer(404, error_xml("NoSuchKey", key))
            if self.precondition_fails(obj):
                return self.refuse_precondition()
            del objects[key]
            return self.answer(204)


def main():
    global LOG
    args = sys.argv[1:]
    address = "127.0.0.1"
    global HMAC_KEY, BEARER, SESSION_HOST, OAUTH_REFRESH, SERVICE_ACCOUNT, USER_PROJECT
    while args[0].startswith("--"):
        if args[0] == "--address":
            address = args[1]
        elif args[0] == "--hmac":
            HMAC_KEY = tuple(args[1].split(":", 1))
        elif args[0] == "--bearer":
            BEARER = args[1]
        elif args[0] == "--oauth-refresh":
            OAUTH_REFRESH = tuple(args[1].split(":", 2))
        elif args[0] == "--service-account":
            email, _, modulus = args[1].rpartition(":")
            SERVICE_ACCOUNT = (email, int(modulus, 16))
        elif args[0] == "--user-project":
            USER_PROJECT = args[1]
        elif args[0] == "--session-host":
            SESSION_HOST = args[1]
        args = args[2:]
    port, LOG, buckets = int(args[0]), args[1], args[2:]
    for bucket in buckets:
        BUCKETS[bucket] = {}
    server = http.server.ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening {server.server_address[1]}", flush=True)
    sys.stdin.read()  # until the test closes stdin
    server.shutdown()


if __name__ == "__main__":
    main()
