# SPDX-License-Identifier: MIT
"""PgBouncer in session pooling mode in front of the test PostgreSQL, for tests and benchmarks
(docs/operations.md recommends it to workers that start a process per tile).

    bouncer = PgBouncer(upstream_dsn).start()
    bouncer.dsn_for(dsn_of_a_database_in_the_cluster)  # the same database through the pooler
    bouncer.stop()

It listens on loopback and on a Unix socket in its directory (`socket_dsn_for`: the setup
docs/operations.md recommends, a PgBouncer on each worker), accepts any client user without a
password (auth_type = any) and connects upstream as the user of the upstream DSN. PgBouncer
refuses to run as root; as root it runs as the `postgres` user, from a directory that user
owns."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time


# What docs/operations.md recommends for a PgBouncer of gdal-idem workers: it clears what a
# session may have SET and keeps prepared statements (DISCARD ALL drops them). PgBouncer's
# default, DISCARD ALL, is what a pooler shared with other applications keeps.
RECOMMENDED_RESET_QUERY = "RESET ALL"
DEFAULT_RESET_QUERY = "DISCARD ALL"


def _keywords(dsn):
    """libpq keyword string -> dict (no quoting support; test DSNs have none)."""
    return dict(part.split("=", 1) for part in dsn.split())


def write_ini(path, upstream, listen_addr, listen_port, socket_dir, log_dir, pool_size,
              reset_query=RECOMMENDED_RESET_QUERY):
    """A pgbouncer.ini in session pooling for gdal-idem workers: every database to `upstream`
    (libpq keywords), any client user without a password (auth_type = any), its log in
    `log_dir`; `socket_dir` empty for no Unix socket."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"""[databases]
* = {upstream}
[pgbouncer]
listen_addr = {listen_addr}
listen_port = {listen_port}
unix_socket_dir = {socket_dir}
auth_type = any
pool_mode = session
server_reset_query = {reset_query}
max_client_conn = 500
default_pool_size = {pool_size}
logfile = {log_dir}/pgbouncer.log
pidfile =
""")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    def __init__(self, upstream_dsn, pool_size=20, reset_query=None):
        self.upstream = _keywords(upstream_dsn)
        self.pool_size = pool_size
        self.reset_query = reset_query or RECOMMENDED_RESET_QUERY
        self.port = None
        self.dir = None
        self.proc = None

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="idem-pgbouncer-")
        self.port = _free_port()
        upstream = " ".join(f"{k}={self.upstream[k]}" for k in ("host", "port", "user", "password")
                            if k in self.upstream)
        ini = os.path.join(self.dir, "pgbouncer.ini")
        write_ini(ini, upstream, "127.0.0.1", self.port, self.dir, self.dir, self.pool_size,
                  self.reset_query)
        command = ["pgbouncer", ini]
        if os.getuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            os.chown(ini, user.pw_uid, user.pw_gid)
            command = ["runuser", "-u", "postgres", "--"] + command
        # PgBouncer logs every connection to stderr as well: a pipe nobody reads would fill
        # after some 200 connections and block it (new clients then time out).
        stderr_path = os.path.join(self.dir, "stderr.log")
        with open(stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(stderr_path) as stderr:
                    raise RuntimeError("pgbouncer exited: " + stderr.read() + self._log())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("pgbouncer did not start listening" + self._log())

    def _log(self):
        path = os.path.join(self.dir or "", "pgbouncer.log")
        return ("\n" + open(path).read()[-2000:]) if os.path.exists(path) else ""

    def dsn_for(self, dsn):
        """The database of `dsn` (in the upstream cluster) reached through the pooler."""
        dbname = _keywords(dsn)["dbname"]
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user=idem"

    def socket_dsn_for(self, dsn):
        """The same as dsn_for, through the pooler's Unix socket."""
        dbname = _keywords(dsn)["dbname"]
        return f"host={self.dir} port={self.port} dbname={dbname} user=idem"

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
