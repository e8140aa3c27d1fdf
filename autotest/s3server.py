# SPDX-License-Identifier: MIT
"""A real S3-compatible server (npm's s3rver, through tools/s3rver/serve.js) on loopback, for the
object-storage tests and benchmarks: start it, point GDAL's /vsis3/ at it, and read which
requests it received (the request log has one "METHOD /bucket/key STATUS" line per request)."""

import os
import shutil
import subprocess

from storeserver import RequestLog, drain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVE_JS = os.path.join(ROOT, "tools", "s3rver", "serve.js")
MODULES = os.path.join(ROOT, "tools", "s3rver", "node_modules", "s3rver")
ACCESS_KEY = "S3RVER"  # s3rver's built-in test credentials
SECRET_KEY = "S3RVER"


class S3Server(RequestLog):
    def __init__(self, workdir, buckets=("idem-test",), slow=None):
        """`slow`: (part of a path, ms): the server answers reads (GET, HEAD) of such paths
        that much later, and logs each to `arrivals_path`: "ARRIVED METHOD URL" when it arrives,
        "ANSWERING METHOD URL" before its answer is sent."""
        self.workdir = str(workdir)
        self.buckets = list(buckets)
        self.slow = slow
        self.data_dir = os.path.join(self.workdir, "data")
        self.log_path = os.path.join(self.workdir, "requests.log")  # each request, answered
        self.arrivals_path = self.log_path + ".arrived"  # each slowed request's arrival, answer
        self.proc = None
        self.port = None

    def start(self):
        node = shutil.which("node")
        if node is None or not os.path.isdir(MODULES):
            raise RuntimeError("s3rver is not installed: run `make deps` (npm ci in tools/s3rver)")
        os.makedirs(self.data_dir, exist_ok=True)
        open(self.log_path, "w").close()
        open(self.arrivals_path, "w").close()
        env = dict(os.environ)
        env.pop("S3RVER_SLOW", None)
        if self.slow:
            env["S3RVER_SLOW"] = f"{self.slow[0]}:{int(self.slow[1])}"
        self.proc = subprocess.Popen([node, SERVE_JS, self.data_dir, "0", self.log_path,
                                      *self.buckets], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("listening "):
            self.proc.kill()
            raise RuntimeError(f"s3rver did not start: {line}{self.proc.stderr.read()}")
        self.port = int(line.split()[1])
        drain(self.proc, self.proc.stdout, self.proc.stderr)
        return self

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def config(self):
        """GDAL config options (also environment variables) that reach this server."""
        return {"AWS_S3_ENDPOINT": f"127.0.0.1:{self.port}", "AWS_HTTPS": "NO",
                "AWS_VIRTUAL_HOSTING": "FALSE", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1",
                "AWS_NO_SIGN_REQUEST": "NO"}
