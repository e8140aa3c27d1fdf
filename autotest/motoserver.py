# SPDX-License-Identifier: MIT
"""moto's S3 server (tools/pyenv/serve_moto.py) on loopback: an S3 implementation that honours
conditional writes (If-Match, If-None-Match on PUT) as Amazon S3 does, which s3rver ignores. The
object-storage tests that depend on a store refusing a conditional upload run against it."""

import os

from storeserver import start_listening, stop_by_stdin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, "tools", "pyenv", "venv", "bin", "python")
SERVE = os.path.join(ROOT, "tools", "pyenv", "serve_moto.py")


def require_venv():
    if not os.path.exists(PYTHON):
        raise RuntimeError("the tests' Python venv is missing: run `make deps` "
                           "(scripts/install-deps makes tools/pyenv/venv)")


def s3_config(endpoint):
    """GDAL config options (also environment variables) that reach a moto server at
    `endpoint` (address:port)."""
    return {"AWS_S3_ENDPOINT": endpoint, "AWS_HTTPS": "NO", "AWS_VIRTUAL_HOSTING": "FALSE",
            "AWS_ACCESS_KEY_ID": "moto", "AWS_SECRET_ACCESS_KEY": "moto",
            "AWS_REGION": "us-east-1", "AWS_NO_SIGN_REQUEST": "NO"}


class MotoS3Server:
    def __init__(self, buckets=("idem-test",)):
        self.buckets = list(buckets)
        self.proc = None
        self.port = None

    def start(self):
        require_venv()
        self.proc, self.port = start_listening([PYTHON, SERVE, "0", *self.buckets],
                                               "moto's S3 server")
        return self

    def stop(self):
        stop_by_stdin(self.proc)
        self.proc = None

    def config(self):
        """GDAL config options (also environment variables) that reach this server."""
        return s3_config(f"127.0.0.1:{self.port}")
