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
        # --disableTelemetry: no request leaves the machine; in memory: nothing to clean up.
        self.proc = subprocess.Popen([AZURITE, "--blobHost", "127.0.0.1", "--blobPort", "0",
                                      "--disableTelemetry", "--inMemoryPersistence",
                                      "--skipApiVersionCheck", "--silent"], cwd=self.workdir,
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

    def connection_string(self):
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
                f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};")

    def config(self):
        """GDAL config options (also environment variables) that reach this store."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    def committed_blocks(self, container, blob):
        """The IDs of the blocks the blob was committed from (Get Block List), [] for a blob
        written by one Put Blob; a request of the test's own, signed with the shared key."""
        path = f"/{ACCOUNT}/{container}/{blob}"
        date = email.utils.formatdate(usegmt=True)
        headers = f"x-ms-date:{date}\nx-ms-version:2020-10-02\n"
        to_sign = ("GET\n" + "\n" * 11 + headers + f"/{ACCOUNT}{path}\n"
                   "blocklisttype:committed\ncomp:blocklist")
        mac = hmac.new(base64.b64decode(KEY), to_sign.encode(), hashlib.sha256).digest()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}?comp=blocklist&blocklisttype=committed",
            headers={"x-ms-date": date, "x-ms-version": "2020-10-02",
                     "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            tree = ET.fromstring(answer.read())
        return [e.text for e in tree.iter("Name")]
