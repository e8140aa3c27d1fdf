"""moto's S3 server for the tests (run with tools/pyenv/venv/bin/python):

    serve_moto.py [--address ADDRESS] [--versioned] PORT BUCKET...

starts it on ADDRESS:PORT (default 127.0.0.1; port 0: any free port), creates the buckets (with
versioning on, when --versioned: every upload that lands stays listed as a version of its key),
prints "listening <port>" and serves until stdin closes or the process is terminated."""

import argparse
import sys

import boto3
from moto.server import ThreadedMotoServer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--versioned", action="store_true")
    parser.add_argument("port", type=int)
    parser.add_argument("buckets", nargs="*")
    args = parser.parse_args()
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
