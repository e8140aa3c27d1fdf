# SPDX-License-Identifier: MIT
"""The tests' Google Cloud Storage store (tools/gcs/serve_gcs.py) on loopback: GCS's XML API as
GDAL's /vsigs/ uses it, with object generations and x-goog-if-generation-match preconditions.
Start it, point GDAL at it (config()), and read which requests it received."""

import os

from storeserver import RequestLog, start_listening, stop_by_stdin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE = os.path.join(ROOT, "tools", "gcs", "serve_gcs.py")


def gcs_config(endpoint, hmac=None):
    """GDAL config options (also environment variables) that reach a GCS store at `endpoint`
    (http://address:port): unsigned requests, or signed with the HMAC key `hmac`
    ((access key, secret)) the store was started with."""
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


class GcsServer(RequestLog):
    def __init__(self, workdir, buckets=("idem-test",), hmac=None, session_host=None):
        """`hmac`: (access key, secret) every request but a session's must be signed with;
        `session_host`: the host resumable sessions are handed out at (else the one asked)."""
        self.buckets = list(buckets)
        self.hmac = hmac
        self.session_host = session_host
        self.log_path = os.path.join(str(workdir), "gcs-requests.log")
        self.proc = None
        self.port = None

    def start(self):
        open(self.log_path, "w").close()
        self.proc, self.port = start_listening(
            ["/usr/bin/python3", SERVE, *(["--hmac", ":".join(self.hmac)] if self.hmac else []),
             *(["--session-host", self.session_host] if self.session_host else []),
             "0", self.log_path, *self.buckets], "the GCS store")
        return self

    def stop(self):
        stop_by_stdin(self.proc)
        self.proc = None

    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def config(self):
        """GDAL config options (also environment variables) that reach this store."""
        return gcs_config(self.endpoint(), self.hmac)
