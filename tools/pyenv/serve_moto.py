# SPDX-License-Identifier: MIT
"""moto's S3 server for the tests (run with tools/pyenv/venv/bin/python):

    serve_moto.py [--address ADDRESS] [--versioned] PORT BUCKET...

starts it on ADDRESS:PORT (default 127.0.0.1; port 0: any free port), creates the buckets (with
versioning on, when --versioned: every upload that lands stays listed as a version of its key),
prints "listening <port>" and serves until stdin closes or the process is terminated."""

import argparse
import sys

import boto3
from moto.server import ThreadedMotoServer


def honour_if_match_on_complete():
    """moto 5.2 honours If-None-Match: * on CompleteMultipartUpload but ignores If-Match there.
    Amazon S3 (API reference, CompleteMultipartUpload, "If-Match") completes the upload only
    when the key's current ETag is the one given: 412 PreconditionFailed when it differs, 404
    NoSuchKey when no object has the key. This adds that check in front of moto's own handler
    (autotest/test_serve_moto.py compares it with the documentation). A completion repeated for
    the upload that made the current object stays idempotent, as in moto."""
    from moto.s3.exceptions import MissingKey, PreconditionFailed
    from moto.s3.responses import S3Response

    original = S3Response._key_response_post

    def _key_response_post(self, request, body, bucket_name, query, key_name):
        if_match = self.headers.get("If-Match")
        if query.get("uploadId") and if_match:
            existing = self.backend.get_object(bucket_name, key_name)
            if existing is None:
                raise MissingKey(key=key_name)
            repeated = existing.multipart is not None and \
                existing.multipart.id == query["uploadId"][0]
            if not repeated and existing.etag not in (if_match, f'"{if_match}"'):
                raise PreconditionFailed("If-Match")
        return original(self, request, body, bucket_name, query, key_name)

    S3Response._key_response_post = _key_response_post


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--versioned", action="store_true")
    parser.add_argument("port", type=int)
    parser.add_argument("buckets", nargs="*")
    args = parser.parse_args()
    honour_if_match_on_complete()
    server = ThreadedMotoServer(ip_address=args.address, port=args.port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="moto", aws_secret_access_key="moto")
    for bucket in args.buckets:
        client.create_bucket(Bucket=bucket)
        if args.versioned:
            client.put_bucket_versioning(Bucket=bucket,
                                         VersioningConfiguration={"Status": "Enabled"})
    print(f"listening {port}", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or terminates us)
    server.stop()


if __name__ == "__main__":
    main()
