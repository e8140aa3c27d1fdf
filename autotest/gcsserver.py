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
# An OAuth2 refresh token and the client it was given to (GS_OAUTH2_REFRESH_TOKEN and
# GS_OAUTH2_CLIENT_ID/SECRET), which the store's token endpoint takes.
TEST_REFRESH = ("1//idem-test-refresh-token", "idem-client.apps.googleusercontent.com",
                "idem-client-secret")
TEST_SERVICE_ACCOUNT = "idem-writer@idem-test.iam.gserviceaccount.com"
TEST_USER_PROJECT = "idem-billing-project"


def service_account_key(directory):
    """A new RSA key for TEST_SERVICE_ACCOUNT: (the path of its JSON key file, as
    GOOGLE_APPLICATION_CREDENTIALS names one, the key's modulus in hex)."""
    import json
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = os.path.join(str(directory), "service-account.json")
    with open(path, "w") as out:
        json.dump({"type": "service_account", "project_id": "idem-test",
                   "private_key_id": "0", "private_key": pem,
                   "client_email": TEST_SERVICE_ACCOUNT}, out)
    return path, format(key.public_key().public_numbers().n, "x")


def gcs_config(endpoint, hmac=None, bearer=None, oauth=None, key_file=None, user_project=None):
    """GDAL config options (also environment variables) that reach a GCS store at `endpoint`
    (http://address:port): unsigned requests, signed with the HMAC key `hmac` ((access key,
    secret)) the store was started with, or (`bearer`) with the token the store gives: as a
    Compute Engine machine's metadata server, or (`oauth`) as Google's OAuth2 token endpoint
    for TEST_REFRESH ("refresh") or for the service account whose JSON key is `key_file`
    ("service_account"). `user_project`: GS_USER_PROJECT."""
    config = {"CPL_GS_ENDPOINT": endpoint + "/", "GS_NO_SIGN_REQUEST": "NO"}
    if user_project is not None:
        config["GS_USER_PROJECT"] = user_project
    if oauth == "refresh":
        config.update({"GS_OAUTH2_REFRESH_TOKEN": TEST_REFRESH[0],
                       "GS_OAUTH2_CLIENT_ID": TEST_REFRESH[1],
                       "GS_OAUTH2_CLIENT_SECRET": TEST_REFRESH[2],
                       "GOA2_AUTH_URL_TOKEN": endpoint + "/token", "CPL_GCE_SKIP": "YES"})
    elif oauth == "service_account":
        config.update({"GOOGLE_APPLICATION_CREDENTIALS": key_file,
                       "GO2A_AUD": endpoint + "/token", "CPL_GCE_SKIP": "YES"})
    elif bearer is not None:
        config.update({"CPL_GCE_CHECK_LOCAL_FILES": "NO", "CPL_GCE_SKIP": "NO",
                       "CPL_GCE_CREDENTIALS_URL":
                           endpoint + "/computeMetadata/v1/instance/service-accounts/default/token"})
    elif hmac is None:
        config["GS_NO_SIGN_REQUEST"] = "YES"
    else:
        config.update({"GS_ACCESS_KEY_ID": hmac[0], "GS_SECRET_ACCESS_KEY": hmac[1]})
    return config


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
    """The body of a module fixture: a GcsServer with `options` (hmac, bearer, oauth,
    user_project, session_host) holding `bucket`, its log in a new directory `name`, yielded
    started and stopped after."""
    server = GcsServer(tmp_path_factory.mktemp(name), buckets=[bucket], **options).start()
    try:
        yield server
    finally:
        server.stop()


class GcsServer(RequestLog):
    def __init__(self, workdir, buckets=("idem-test",), hmac=None, session_host=None,
                 bearer=None, oauth=None, user_project=None):
        """`hmac`: (access key, secret) every request but a session's must be signed with;
        `session_host`: the host resumable sessions are handed out at (else the one asked);
        `bearer`: the token every request must carry, served as a metadata server serves it, or
        with `oauth` ("refresh", "service_account") as Google's OAuth2 token endpoint gives it
        for TEST_REFRESH or a new service account key; `user_project`: the project every request
        must name (a requester-pays bucket)."""
        self.buckets = list(buckets)
        self.hmac = hmac
        self.session_host = session_host
        self.bearer = TEST_BEARER if oauth and bearer is None else bearer
        self.oauth = oauth
        self.user_project = user_project
        self.key_file = self.modulus = None
        if oauth == "service_account":
            self.key_file, self.modulus = service_account_key(workdir)
        self.log_path = os.path.join(str(workdir), "gcs-requests.log")
        self.proc = None
        self.port = None

    def start(self):
        open(self.log_path, "w").close()
        self.proc, self.port = start_listening(
            ["/usr/bin/python3", SERVE, *(["--hmac", ":".join(self.hmac)] if self.hmac else []),
             *(["--session-host", self.session_host] if self.session_host else []),
             *(["--bearer", self.bearer] if self.bearer else []),
             *(["--oauth-refresh", ":".join(TEST_REFRESH)] if self.oauth == "refresh" else []),
             *(["--service-account", f"{TEST_SERVICE_ACCOUNT}:{self.modulus}"]
               if self.modulus else []),
             *(["--user-project", self.user_project] if self.user_project else []),
             "0", self.log_path, *self.buckets], "the GCS store")
        return self

    def stop(self):
        stop_by_stdin(self.proc)
        self.proc = None

    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def config(self):
        """GDAL config options (also environment variables) that reach this store."""
        return gcs_config(self.endpoint(), self.hmac, self.bearer, self.oauth, self.key_file,
                          self.user_project)
