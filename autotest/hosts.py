# SPDX-License-Identifier: MIT
"""Hosts for the many-hosts tests: network namespaces on a private bridge, each with an address of
its own, a host name of its own and faults of its own.

    net = Network()                      # a switch: a namespace holding a bridge
    db = net.add(DbHost, "db")           # PostgreSQL + PostGIS, and PgBouncer
    store = net.add(StorageHost, "s3")   # moto's S3 server (versioned buckets), a GCS store
    w1 = net.add(Host, "w1")             # a worker: run commands in it with w1.popen / w1.run
    net.cut(w1); net.restore(w1)         # its link down (every packet dropped), then back
    net.lossy(w1, 20)                    # 20% of its packets dropped, both ways
    net.close()

Addresses are link-local (169.254.N.0/24, N chosen per run). Nothing leaves the machine: the
bridge lives in a "switch" namespace of its own, and this process (the operator's host) reaches
the subnet through a port of its own on it. Faults are nftables rules in the switch's bridge
table, so the worker's own stack sees what a real partition or lossy link does: packets that go
out and never arrive, no error on send.

Every host runs under its own UTS namespace with its name as host name, so the ledger records
which host claimed what (worker_host). Files are shared (one mount namespace): each worker gets
a directory of its own for CPL_TMPDIR, as a host has its own disk.

Each run is recorded under /run/idem-hosts/<run>; `Network.sweep_stale()` removes what a killed
test run left (its namespaces and its servers), and the tests call it first."""

import glob
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess

import azuriteserver
import gcsserver
import motoserver
import pgbouncer
from idem_testlib import wait_until

RECORDS = "/run/idem-hosts"
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1] if glob.glob(
    "/usr/lib/postgresql/*/bin") else None
FAKETIME_LIB = next(iter(glob.glob("/usr/lib/*/faketime/libfaketime.so.1")), None)


def missing():
    """Why this machine cannot build hosts, or None."""
    if os.getuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft", "nsenter", "unshare", "pgbouncer", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-deps installs it)"
    if PG_BIN is None:
        return "PostgreSQL's server programs are not installed"
    probe = f"idemprobe{os.getpid()}"
    proc = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if proc.returncode == 0:
        proc = subprocess.run(in_ns(probe, "ip", "link", "set", "lo", "up"),
                              capture_output=True, text=True)
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if proc.returncode != 0:
        return f"cannot make a network namespace here: {proc.stderr.strip()}"
    return None


def in_ns(ns, *args):
    """`args` run in the network namespace `ns`. nsenter only enters it: `ip -n` and `ip netns
    exec` also make a mount namespace and remount /sys in it, which fails in a chroot (its root
    is not a mount point: scripts/debian-chroot)."""
    return ["nsenter", f"--net=/run/netns/{ns}", *[str(a) for a in args]]


def _sh(*args, check=True, **kwargs):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} exited {proc.returncode}: "
                           f"{proc.stderr.strip()}")
    return proc


def _listening(address, port):
    """Whether something accepts connections at address:port (from this, the operator's host)."""
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


class Host:
    """A host: a network namespace with one link to the switch and an address."""

    def __init__(self, net, name, index):
        self.net = net
        self.name = name
        self.ns = f"{net.run_id}-{name}"
        self.port = f"p-{name}"  # its port on the switch
        self.address = f"{net.prefix}.{index}"
        self.dir = os.path.join(net.dir, name)  # its own disk: CPL_TMPDIR, logs
        os.makedirs(self.dir)
        self.clock_offset = None  # e.g. "+2h": libfaketime on what it runs

    def _create(self):
        net = self.net
        _sh("ip", "netns", "add", self.ns)
        _sh("ip", "link", "add", "eth0", "netns", self.ns, "type", "veth", "peer", "name",
            self.port, "netns", net.switch)
        _sh(*in_ns(net.switch, "ip"), "link", "set", self.port, "master", "br0", "up")
        _sh(*in_ns(self.ns, "ip"), "addr", "add", f"{self.address}/24", "dev", "eth0")
        _sh(*in_ns(self.ns, "ip"), "link", "set", "eth0", "up")
        _sh(*in_ns(self.ns, "ip"), "link", "set", "lo", "up")

    def command(self, args):
        """`args` as run on this host: in its namespace, under its host name."""
        prefix = [*in_ns(self.ns, "unshare"), "--uts", "--", "sh", "-c",
                  'echo "$0" > /proc/sys/kernel/hostname && exec "$@"', self.name]
        return prefix + [str(a) for a in args]

    def environment(self, env=None):
        """The environment of what runs on this host: its own CPL_TMPDIR, its clock, and none of
        the test machine's libpq settings (PGHOST, PGPORT... of scripts/with-postgres)."""
        env = {k: v for k, v in (os.environ if env is None else env).items()
               if not k.startswith("PG")}
        env["CPL_TMPDIR"] = self.dir
        if self.clock_offset:
            env.update(LD_PRELOAD=FAKETIME_LIB, FAKETIME=self.clock_offset,
                       FAKETIME_DONT_FAKE_MONOTONIC="1", FAKETIME_NO_CACHE="1")
        return env

    def popen(self, args, env=None, log=None, **kwargs):
        """Starts `args` on this host, its output (both streams) in the file `log`."""
        if log is not None:
            with open(log, "w", encoding="utf-8") as out:
                return subprocess.Popen(self.command(args), env=self.environment(env),
                                        stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, **kwargs)
        return subprocess.Popen(self.command(args), env=self.environment(env),
                                start_new_session=True, **kwargs)

    def run(self, args, env=None, check=True, timeout=600):
        proc = subprocess.run(self.command(args), env=self.environment(env), capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"on {self.name}: {' '.join(map(str, args))} exited "
                               f"{proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def stop(self):
        pass


class DbHost(Host):
    """PostgreSQL (with PostGIS) on port 5432 and PgBouncer (session pooling) on 6432. The
    cluster's Unix socket (in the host's directory) is how the test, the operator, reads the
    ledger: a socket is a file, so it is reached from any namespace and no fault cuts it."""

    DATABASE = "idem"

    def _create(self):
        super()._create()
        postgres = pwd.getpwnam("postgres")
        os.chown(self.dir, postgres.pw_uid, postgres.pw_gid)
        self.data = os.path.join(self.dir, "data")
        self._as_postgres([f"{PG_BIN}/initdb", "-D", self.data, "-U", "postgres",
                           "--auth=trust", "--no-sync"])
        with open(os.path.join(self.data, "postgresql.conf"), "a", encoding="utf-8") as conf:
            conf.write(f"listen_addresses = '{self.address}'\nport = 5432\n"
                       f"unix_socket_directories = '{self.dir}'\nfsync = off\n"
                       "max_connections = 100\n")
        with open(os.path.join(self.data, "pg_hba.conf"), "a", encoding="utf-8") as hba:
            hba.write(f"host all all {self.net.prefix}.0/24 trust\n")
        self.start_postgres()
        self._as_postgres([f"{PG_BIN}/createdb", "-h", self.dir, self.DATABASE])
        self.psql("CREATE EXTENSION postgis")
        self.bouncer = None
        self.start_pgbouncer()

    def _as_postgres(self, args, check=True):
        return self.run(["runuser", "-u", "postgres", "--", *args], check=check)

    def psql(self, sql):
        return self._as_postgres(["psql", "-h", self.dir, "-d", self.DATABASE, "-v",
                                  "ON_ERROR_STOP=1", "-qAtc", sql]).stdout

    def start_postgres(self):
        self._as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-l",
                           os.path.join(self.dir, "postgres.log"), "-w", "start"])

    def restart_postgres(self, mode="fast"):
        """pg_ctl restart: `fast` (connections ended, a clean shutdown) or `immediate` (a crash:
        the server recovers from its WAL when it starts)."""
        self._as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", mode, "-w", "stop"])
        self.start_postgres()

    def start_pgbouncer(self):
        ini = os.path.join(self.dir, "pgbouncer.ini")
        pgbouncer.write_ini(ini, f"host={self.dir} port=5432 user=postgres", self.address, 6432,
                            "", self.dir, pool_size=40)
        self.bouncer = self.popen(["runuser", "-u", "postgres", "--", "pgbouncer", ini],
                                  log=os.path.join(self.dir, "pgbouncer.stderr"))
        wait_until(lambda: _listening(self.address, 6432) or self.bouncer.poll() is not None,
                 "PgBouncer to listen")
        if self.bouncer.poll() is not None:
            raise RuntimeError("PgBouncer exited: " + open(
                os.path.join(self.dir, "pgbouncer.stderr"), encoding="utf-8").read())

    def restart_pgbouncer(self):
        """PgBouncer stopped at once (SIGTERM: its clients' connections end) and started again."""
        os.killpg(self.bouncer.pid, signal.SIGTERM)
        self.bouncer.wait(timeout=60)
        self.start_pgbouncer()

    def dsn(self, through_pgbouncer=False):
        """The ledger's DSN for a worker host."""
        port = 6432 if through_pgbouncer else 5432
        return f"host={self.address} port={port} dbname={self.DATABASE} user=postgres"

    def local_dsn(self):
        """The ledger's DSN for the test: the cluster's Unix socket."""
        return f"host={self.dir} port=5432 dbname={self.DATABASE} user=postgres"

    def stop(self):
        if getattr(self, "bouncer", None) is not None and self.bouncer.poll() is None:
            os.killpg(self.bouncer.pid, signal.SIGKILL)
            self.bouncer.wait()
        if getattr(self, "data", None) and os.path.exists(os.path.join(self.data, "postmaster.pid")):
            self._as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w",
                               "stop"], check=False)


class StorageHost(Host):
    """Object stores: moto's S3 server on port 9000, with versioned buckets (every upload
    that lands stays listed, so a test can prove that a host uploaded nothing), and the tests'
    GCS store (tools/gcs/serve_gcs.py) on port 9100, which counts the writes that landed per key;
    Azurite on port 10000 once a test asks for it (use_azure()), whose blobs' ETags tell whether
    anything landed (versions()). moto rather than s3rver: moto honours conditional writes as
    S3 does (the fence of a cut-off worker's upload) and does not refuse a host whose clock is
    ahead. `store` ("s3", "gcs" or "azure") chooses which one config(), scheme and versions()
    speak for."""

    BUCKET = "hosts"
    GCS_PORT = 9100
    AZURE_PORT = 10000

    def _create(self):
        super()._create()
        motoserver.require_venv()
        self.store = "s3"
        self.server = self._serve([motoserver.PYTHON, motoserver.SERVE, "--address", self.address,
                                   "--versioned", "9000", self.BUCKET], 9000, "moto")
        self.gcs = self._serve(["/usr/bin/python3", gcsserver.SERVE, "--address", self.address,
                                str(self.GCS_PORT), os.path.join(self.dir, "gcs-requests.log"),
                                self.BUCKET], self.GCS_PORT, "gcs")

    def _serve(self, args, port, name):
        log = os.path.join(self.dir, f"{name}.log")
        server = self.popen(args, stdin=subprocess.PIPE, log=log, cwd=self.dir)
        wait_until(lambda: _listening(self.address, port) or server.poll() is not None,
                   f"{name} to listen")
        if server.poll() is not None:
            raise RuntimeError(f"{name} exited: " + open(log, encoding="utf-8").read())
        return server

    def use_azure(self):
        """Azurite started (once) and made the store, with the container BUCKET."""
        if getattr(self, "azurite", None) is None:
            self.azurite = self._serve(azuriteserver.command(self.address, self.AZURE_PORT),
                                       self.AZURE_PORT, "azurite")
            from osgeo import gdal
            from idem_testlib import gdal_config
            with gdal_config(azuriteserver.azure_config(self.azure_endpoint())):
                assert gdal.Mkdir(f"/vsiaz/{self.BUCKET}", 0o755) == 0
        self.store = "azure"

    def azure_endpoint(self):
        return f"http://{self.address}:{self.AZURE_PORT}"

    def scheme(self):
        return {"s3": "vsis3", "gcs": "vsigs", "azure": "vsiaz"}[self.store]

    def config(self):
        """GDAL configuration (environment) that reaches this store, from any host."""
        retries = {"GDAL_HTTP_MAX_RETRY": "3", "GDAL_HTTP_RETRY_DELAY": "0.5"}
        if self.store == "azure":
            return dict(azuriteserver.azure_config(self.azure_endpoint()), **retries)
        if self.store == "gcs":
            return dict(gcsserver.gcs_config(f"http://{self.address}:{self.GCS_PORT}"), **retries)
        return dict(motoserver.s3_config(f"{self.address}:9000"), **retries)

    def versions(self, prefix=""):
        """{key: number of versions (uploads that landed) + delete markers}: read with boto3
        from moto; from the GCS store, the writes that landed per key. Azurite keeps no count:
        {key: ETag}, which every write that lands changes."""
        if self.store == "azure":
            return azuriteserver.blob_etags(self.azure_endpoint(), self.BUCKET, prefix)
        if self.store == "gcs":
            return gcsserver.writes(f"http://{self.address}:{self.GCS_PORT}", self.BUCKET, prefix)
        code = ("import boto3, json, sys\n"
                "c = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1',"
                " aws_access_key_id='moto', aws_secret_access_key='moto')\n"
                "out = {}\n"
                "for page in c.get_paginator('list_object_versions').paginate("
                "Bucket=sys.argv[2], Prefix=sys.argv[3]):\n"
                "    for v in page.get('Versions', []) + page.get('DeleteMarkers', []):\n"
                "        out[v['Key']] = out.get(v['Key'], 0) + 1\n"
                "print(json.dumps(out))\n")
        proc = subprocess.run([motoserver.PYTHON, "-c", code, f"http://{self.address}:9000",
                               self.BUCKET, prefix], capture_output=True, text=True, timeout=120,
                              check=True)
        return json.loads(proc.stdout)

    def stop(self):
        for server in (getattr(self, "server", None), getattr(self, "gcs", None),
                       getattr(self, "azurite", None)):
            if server is not None and server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


class Network:
    """A switch and the hosts on it; `close()` (also on a failed test) removes everything."""

    def __init__(self):
        self.run_id = f"idem{os.getpid() % 100000}"
        self.prefix = f"169.254.{random.randint(10, 250)}"
        self.switch = f"{self.run_id}-sw"
        self.operator_port = f"{self.run_id}op"
        self.dir = f"/tmp/{self.run_id}-hosts"
        self.hosts = []
        self.rules = {}  # host name -> nftables statements on its port
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        os.makedirs(RECORDS, exist_ok=True)
        with open(os.path.join(RECORDS, self.run_id), "w", encoding="utf-8") as record:
            json.dump({"pid": os.getpid(), "switch": self.switch, "dir": self.dir}, record)
        try:
            _sh("ip", "netns", "add", self.switch)
            _sh(*in_ns(self.switch, "ip"), "link", "add", "br0", "type", "bridge")
            _sh(*in_ns(self.switch, "ip"), "link", "set", "br0", "up")
            # The operator's port: this process reaches the hosts by it.
            _sh("ip", "link", "add", self.operator_port, "type", "veth", "peer", "name", "p-op",
                "netns", self.switch)
            _sh(*in_ns(self.switch, "ip"), "link", "set", "p-op", "master", "br0", "up")
            _sh("ip", "addr", "add", f"{self.prefix}.1/24", "dev", self.operator_port)
            _sh("ip", "link", "set", self.operator_port, "up")
            self._apply_rules()
        except BaseException:
            self.close()
            raise

    def add(self, kind, name):
        host = kind(self, name, len(self.hosts) + 2)
        self.hosts.append(host)
        with open(os.path.join(RECORDS, self.run_id), "r+", encoding="utf-8") as record:
            data = json.load(record)
            data.setdefault("namespaces", []).append(host.ns)
            record.seek(0)
            json.dump(data, record)
            record.truncate()
        host._create()
        return host

    def _apply_rules(self):
        lines = ["flush ruleset", "table bridge faults {",
                 "  chain forward { type filter hook forward priority 0; policy accept;"]
        for port_rules in self.rules.values():
            lines += [f"    {rule}" for rule in port_rules]
        lines += ["  }", "}"]
        subprocess.run(in_ns(self.switch, "nft", "-f", "-"),
                       input="\n".join(lines) + "\n", text=True, check=True)

    def cut(self, host):
        """Every packet to and from `host` dropped: its link is cut."""
        self.rules[host.name] = [f'iifname "{host.port}" drop', f'oifname "{host.port}" drop']
        self._apply_rules()

    def lossy(self, host, percent):
        """`percent` % of the packets to and from `host` dropped, at random."""
        self.rules[host.name] = [
            f'iifname "{host.port}" numgen random mod 100 < {int(percent)} drop',
            f'oifname "{host.port}" numgen random mod 100 < {int(percent)} drop']
        self._apply_rules()

    def restore(self, host):
        self.rules.pop(host.name, None)
        self._apply_rules()

    def close(self):
        for host in reversed(self.hosts):
            try:
                host.stop()
            except Exception:  # noqa: BLE001 (cleaning up: go on with the rest)
                pass
        self._remove(self.switch, [h.ns for h in self.hosts], self.dir, self.operator_port)
        record = os.path.join(RECORDS, self.run_id)
        if os.path.exists(record):
            os.unlink(record)

    @staticmethod
    def _remove(switch, namespaces, directory, operator_port=None):
        for ns in namespaces:
            # What still runs in it (a worker left behind by a failed test) is killed first.
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _sh("ip", "netns", "del", ns, check=False)
        _sh("ip", "netns", "del", switch, check=False)
        if operator_port:
            _sh("ip", "link", "del", operator_port, check=False)
        shutil.rmtree(directory, ignore_errors=True)

    @classmethod
    def sweep_stale(cls):
        """Removes the hosts of runs whose test process is gone (killed before its cleanup)."""
        if not os.path.isdir(RECORDS):
            return
        for name in os.listdir(RECORDS):
            path = os.path.join(RECORDS, name)
            try:
                with open(path, encoding="utf-8") as record:
                    data = json.load(record)
            except (OSError, ValueError):
                continue
            if os.path.exists(f"/proc/{data.get('pid')}"):
                continue
            cls._remove(data["switch"], data.get("namespaces", []), data["dir"])
            os.unlink(path)
