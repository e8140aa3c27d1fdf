"""moto's S3 server (tools/pyenv/serve_moto.py) on loopback: an S3 implementation that honours
conditional writes (If-Match, If-None-Match on PUT) as Amazon S3 does, which s3rver ignores. The
object-storage tests that depend on a store refusing a conditional upload run against it."""

import os
import subprocess

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
        self.proc = subprocess.Popen([PYTHON, SERVE, "0", *self.buckets], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.proc.kill()
            raise RuntimeError(f"moto's S3 server did not start: {line}{self.proc.stderr.read()}")
        self.port = int(line.split()[1])
        return self

    def stop(self):
        if self.proc is not None:
            self.proc.stdin.close()  # the server's signal to stop
            self.proc.wait(timeout=10)
            self.proc = None

    def config(self):
        """GDAL config options (also environment variables) that reach this server."""
        return s3_config(f"127.0.0.1:{self.port}")
