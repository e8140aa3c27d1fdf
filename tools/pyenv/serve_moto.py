"""moto's S3 server on loopback for the tests (run with tools/pyenv/venv/bin/python):
serve_moto.py PORT BUCKET... starts it on 127.0.0.1:PORT (0: any free port), creates the buckets,
prints "listening <port>" and serves until stdin closes or the process is terminated."""

import sys

import boto3
from moto.server import ThreadedMotoServer


def main():
    port = int(sys.argv[1])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1",
                          aws_access_key_id="moto", aws_secret_access_key="moto")
    for bucket in sys.argv[2:]:
        client.create_bucket(Bucket=bucket)
    print(f"listening {port}", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or terminates us)
    server.stop()


if __name__ == "__main__":
    main()
