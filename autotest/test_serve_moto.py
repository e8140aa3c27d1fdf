# SPDX-License-Identifier: MIT
"""The tests' S3 server (tools/pyenv/serve_moto.py: moto plus what S3 documents and moto lacks)
against Amazon S3's API reference for conditional writes: PutObject and CompleteMultipartUpload
with If-None-Match: * (412 when the key exists) and If-Match (412 when the ETag differs, 404
when there is no object). Run through boto3, the way any S3 client would see the store: the
checks run in the tests' venv (tools/pyenv, which has boto3), one pytest test each."""

import subprocess
import sys

import pytest

from motoserver import PYTHON, MotoS3Server, require_venv

CHECKS = ["complete_multipart_upload_honours_if_match",
          "complete_multipart_upload_honours_if_none_match", "put_object_honours_both"]


@pytest.fixture(scope="module")
def server():
    require_venv()
    server = MotoS3Server(buckets=["cond"]).start()
    yield server
    server.stop()


@pytest.mark.parametrize("check", CHECKS)
def test_the_store_follows_s3s_documentation(server, check):
    proc = subprocess.run([PYTHON, __file__, str(server.port), check], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


PART = b"x" * (5 << 20)  # S3's smallest part but the last


def complete(client, key, body=b"tail", **condition):
    upload = client.create_multipart_upload(Bucket="cond", Key=key)["UploadId"]
    etags = [client.upload_part(Bucket="cond", Key=key, UploadId=upload, PartNumber=n + 1,
                                Body=part)["ETag"] for n, part in enumerate([PART, body])]
    parts = [{"ETag": e, "PartNumber": n + 1} for n, e in enumerate(etags)]
    try:
        return client.complete_multipart_upload(Bucket="cond", Key=key, UploadId=upload,
                                                MultipartUpload={"Parts": parts}, **condition)
    except botocore.exceptions.ClientError as error:
        client.abort_multipart_upload(Bucket="cond", Key=key, UploadId=upload)
        return error.response["ResponseMetadata"]["HTTPStatusCode"]


def complete_multipart_upload_honours_if_match(client):
    client.put_object(Bucket="cond", Key="m", Body=b"first")
    current = client.head_object(Bucket="cond", Key="m")["ETag"]
    assert complete(client, "m", IfMatch='"0000"') == 412
    assert client.head_object(Bucket="cond", Key="m")["ETag"] == current
    done = complete(client, "m", body=b"second", IfMatch=current)
    assert done["ETag"] != current
    assert client.head_object(Bucket="cond", Key="m")["ETag"] == done["ETag"]
    assert complete(client, "absent", IfMatch=current) == 404
    try:
        client.head_object(Bucket="cond", Key="absent")
        raise AssertionError("a refused completion left an object")
    except botocore.exceptions.ClientError:
        pass


def complete_multipart_upload_honours_if_none_match(client):
    assert complete(client, "n", IfNoneMatch="*")["ETag"]
    assert complete(client, "n", IfNoneMatch="*") == 412


def put_object_honours_both(client):
    client.put_object(Bucket="cond", Key="p", Body=b"a")
    etag = client.head_object(Bucket="cond", Key="p")["ETag"]
    for condition in ({"IfNoneMatch": "*"}, {"IfMatch": '"0000"'}):
        try:
            client.put_object(Bucket="cond", Key="p", Body=b"b", **condition)
            raise AssertionError(f"PutObject with {condition} was not refused")
        except botocore.exceptions.ClientError as refused:
            assert refused.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    client.put_object(Bucket="cond", Key="p", Body=b"c", IfMatch=etag)


if __name__ == "__main__":
    import boto3
    import botocore.exceptions
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{sys.argv[1]}",
                      region_name="us-east-1", aws_access_key_id="moto",
                      aws_secret_access_key="moto")
    globals()[sys.argv[2]](s3)
    print("ok")
