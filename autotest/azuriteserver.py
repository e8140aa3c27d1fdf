"""Azurite, Azure Blob Storage's emulator (npm, tools/azurite), on loopback for the tests: start
it, point GDAL's /vsiaz/ at it with the emulator's documented development account (a shared
key, which IDEM signs its conditional requests with), and stop it."""

import os
import re
import subprocess

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
