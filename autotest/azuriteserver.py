# SPDX-License-Identifier: MIT
"""Azurite, Azure Blob Storage's emulator (npm, tools/azurite), on loopback for the tests: start
it, point GDAL's /vsiaz/ at it with the emulator's documented development account (a shared
key, which IDEM signs its conditional requests with), and stop it."""

import base64
import email.utils
import hashlib
import hmac
import os
import re
import subprocess
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

from storeserver import drain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AZURITE = os.path.join(ROOT, "tools", "azurite", "node_modules", ".bin", "azurite-blob")
ACCOUNT = "devstoreaccount1"  # Azurite's development account and key, as Azure documents them
KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw"
       "==")


class AzuriteServer:
    def __init__(self, workdir):
        self.workdir = str(workdir)
        self.proc = None
        self.port = None

    def start(self):
        if not os.path.exists(AZURITE):
            raise RuntimeError("Azurite is not installed: run `make deps` (npm ci in tools/azurite)")
        self.proc = subprocess.Popen(command("127.0.0.1", 0), cwd=self.workdir,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in self.proc.stdout:
            found = re.search(r"successfully listens on http://127\.0\.0\.1:(\d+)", line)
            if found:
                self.port = int(found.group(1))
                drain(self.proc, self.proc.stdout)
                return self
        self.proc.wait()
        raise RuntimeError(f"Azurite did not start (exit {self.proc.returncode})")

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None

    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def config(self):
        """GDAL config options (also environment variables) that reach this store."""
        return azure_config(self.endpoint())

    def committed_blocks(self, container, blob):
        """The IDs of the blocks the blob was committed from, [] for a blob written by one Put
        Blob."""
        return committed_blocks(self.endpoint(), container, blob)


def command(address, port):
    """Azurite's blob service on `address`:`port`, in memory."""
    # --disableTelemetry: no request leaves the machine; in memory: nothing to clean up.
    return [AZURITE, "--blobHost", address, "--blobPort", str(port), "--disableTelemetry",
            "--inMemoryPersistence", "--skipApiVersionCheck", "--silent"]


def azure_config(endpoint):
    """GDAL config options that reach Azurite at `endpoint` (http://address:port) with its
    development account, a shared key (IDEM signs its conditional requests with it)."""
    return {"AZURE_STORAGE_CONNECTION_STRING": (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
        f"BlobEndpoint={endpoint}/{ACCOUNT};")}


def _signed_get(endpoint, path, query):
    """A GET of the test's own (not GDAL's, not IDEM's), signed with the shared key: the XML
    answer's root element. `path` is /container[/blob], `query` a dict of parameters."""
    date = email.utils.formatdate(usegmt=True)
    headers = f"x-ms-date:{date}\nx-ms-version:2020-10-02\n"
    resource = f"/{ACCOUNT}/{ACCOUNT}{path}" + "".join(
        f"\n{name}:{query[name]}" for name in sorted(query))
    to_sign = "GET\n" + "\n" * 11 + headers + resource
    mac = hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
    request = urllib.request.Request(
        f"{endpoint}/{ACCOUNT}{urllib.parse.quote(path)}?{urllib.parse.urlencode(query)}",
        headers={"x-ms-date": date, "x-ms-version": "2020-10-02",
                 "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return ET.fromstring(answer.read())


def committed_blocks(endpoint, container, blob):
    """Get Block List: the IDs of the blocks the blob was committed from."""
    tree = _signed_get(endpoint, f"/{container}/{blob}",
                       {"blocklisttype": "committed", "comp": "blocklist"})
    return [e.text for e in tree.iter("Name")]


def blob_etags(endpoint, container, prefix=""):
    """List Blobs: {name: ETag} under `prefix`. Every write that lands changes a blob's ETag,
    identical bytes or not: two equal listings mean nothing landed in between."""
    query = {"comp": "list", "restype": "container"}
    if prefix:
        query["prefix"] = prefix
    tree = _signed_get(endpoint, f"/{container}", query)
    return {b.findtext("Name"): b.findtext("Properties/Etag") for b in tree.iter("Blob")}
