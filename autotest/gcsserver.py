# SPDX-License-Identifier: MIT
"""The tests' Google Cloud Storage store (tools/gcs/serve_gcs.py) on loopback: GCS's XML API as
GDAL's /vsigs/ uses it, with object generations and x-goog-if-generation-match preconditions.
Start it, point GDAL at it (config()), and read which requests it received."""

import os

from storeserver import RequestLog, start_listening, stop_by_stdin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE = os.path.join(ROOT, "tools", "gcs", "serve_gcs.py")


# Credentials the tests start the store with: an HMAC key (access key, secret) and a bearer token.
TEST_HMAC = ("GOOGTS7C7FUP3AIRVJTE2BCD", "bGoa+V7g/yqDXvKRqq+JTFn4uQZbPiQJo4pf9RzJ")
TEST_BEARER = "ya29.idem-test-token"


def gcs_config(endpoint, hmac=None, bearer=None):
    """GDAL config options (also environment variables) that reach a GCS store at `endpoint`
    (http://address:port): unsigned requests, signed with the HMAC key `hmac` ((access key,
    secret)) the store was started with, or (`bearer`) with the token of a Compute Engine
    machine's metadata server, which the store serves."""
    if bearer is not None:
        return {"CPL_GS_ENDPOINT": endpoint + "/", "GS_NO_SIGN_REQUEST": "NO",
                "CPL_GCE_CHECK_LOCAL_FILES": "NO", "CPL_GCE_SKIP": "NO",
                "CPL_GCE_CREDENTIALS_URL":
                    endpoint + "/computeMetadata/v1/instance/service-accounts/default/token"}
    if hmac is None:
        return {"CPL_GS_ENDPOINT": endpoint + "/", "GS_NO_SIGN_REQUEST": "YES"}
    return {"CPL_GS_ENDPOINT": endpoint + "/", "GS_NO_SIGN_REQUEST": "NO",
            "GS_ACCESS_KEY_ID": hmac[0], "GS_SECRET_ACCESS_KEY": hmac[1]}


def _view(endpoint, view, bucket, prefix=""):
    import json
    import urllib.parse
    import urllib.request
    url = f"{endpoint}/_idem/{view}/{bucket}?prefix={urllib.parse.quote(prefix)}"
    with urllib.request.urlopen(url, timeout=60) as answer:
        return json.loads(answer.read())


def writes(endpoint, bucket, prefix=""):
    """{key: writes that landed} under `prefix` (the store's test-only view)."""
    return _view(endpoint, "writes", bucket, prefix)


def open_sessions(endpoint, bucket):
    """{key: resumable upload sessions still open} (the store's test-only view)."""
    return _view(endpoint, "sessions", bucket)


def started(tmp_path_factory, name, bucket, **options):
    """The body of a module fixture: a GcsServer with `options` (hmac, bearer, session_host)
    holding `bucket`, its log in a new directory `name`, yielded started and stopped after."""
    server = GcsServer(tmp_path_factory.mktemp(name), buckets=[bucket], **options).start()
    try:
        yield server
    finally:
        server.stop()


class GcsServer(RequestLog):
    def __init__(self, workdir, buckets=("idem-test",), hmac=None, session_host=None,
                 bearer=None):
        """`hmac`: (access key, secret) every request but a session's must be signed with;
        `session_host`: the host resumable sessions are handed out at (else the one asked);
        `bearer`: the token every request must carry, served as a metadata server serves it."""
        self.buckets = list(buckets)
        self.hmac = hmac
        self.session_host = session_host
        self.bearer = bearer
        self.log_path = os.path.join(str(workdir), "gcs-requests.log")
        self.proc = None
        self.port = None

    def start(self):
        open(self.log_path, "w").close()
        self.proc, self.port = start_listening(
            ["/usr/bin/python3", SERVE, *(["--hmac", ":".join(self.hmac)] if self.hmac else []),
             *(["--session-host", self.session_host] if self.session_host else []),
             *(["--bearer", self.bearer] if self.bearer else []),
             "0", self.log_path, *self.buckets], "the GCS store")
        return self

    def stop(self):
        stop_by_stdin(self.proc)
        self.proc = None

    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def config(self):
        """GDAL config options (also environment variables) that reach this store."""
        return gcs_config(self.endpoint(), self.hmac, self.bearer)
