# SPDX-License-Identifier: MIT
"""The ledger's trust boundary and the names users give (issue 68; docs/ledger.md "Who owns the
ledger", docs/concepts.md). PostgreSQL through scripts/with-postgres with unprivileged roles made
here: a role that makes schema idem first, or owns one object of the ledger, never gets the
administrator's init, prune or workers to run its code. A generator of hostile names (NUL,
newlines, control characters, 100 KB) is fed to every place a namespace, layer or tile enters:
each is refused with a usage error before anything is claimed or written."""

import os
import subprocess
import uuid

import pytest
from osgeo import gdal

from idem_testlib import (GDAL_IDEM, env_with, make_source, pg_fresh_database, run,
                          share_keeps)

gdal.UseExceptions()


# ---- PostgreSQL: who owns the ledger ---------------------------------------------------------

def connect(dsn):
    import psycopg
    return psycopg.connect(dsn, autocommit=True)


def as_role(dsn, role, password):
    return " ".join(part for part in dsn.split()
                    if not part.startswith(("user=", "password="))) + \
        f" user={role} password={password}"


@pytest.fixture
def roles():
    """A fresh database and two login roles without privileges: `owner` (the intended owner of
    the ledger, which owns the database) and `squatter` (any other role with CREATE on it)."""
    admin = pg_fresh_database()
    suffix = uuid.uuid4().hex[:8]
    names = {"owner": f"idem_owner_{suffix}", "squatter": f"idem_squatter_{suffix}"}
    with connect(admin) as conn:
        for name in names.values():
            conn.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pw-{name}'")
        dbname = admin.split("dbname=")[1].split()[0]
        conn.execute(f'ALTER DATABASE "{dbname}" OWNER TO {names["owner"]}')
        conn.execute(f'GRANT CREATE ON DATABASE "{dbname}" TO {names["squatter"]}')
    dsns = {"admin": admin}
    dsns.update({key: as_role(admin, name, f"pw-{name}") for key, name in names.items()})
    yield names, dsns
    with connect(admin) as conn:
        conn.execute(f'ALTER DATABASE "{dbname}" OWNER TO CURRENT_USER')
        for name in names.values():
            conn.execute(f"DROP OWNED BY {name} CASCADE")
            conn.execute(f"DROP ROLE {name}")


def idem(dsn, *args):
    return run([GDAL_IDEM, "--ledger", dsn, *args])


def is_superuser(dsn, role):
    with connect(dsn) as conn:
        return conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s",
                            (role,)).fetchone()[0]


EVIL_FUNCTION = """
CREATE OR REPLACE FUNCTION idem.ensure_history_partitions(cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$ BEGIN EXECUTE format('ALTER ROLE %I SUPERUSER', '{role}'); RETURN 0; END $$
"""


def test_init_refuses_a_schema_idem_another_role_made_first(roles):
    """The squatter makes schema idem first; the administrator's init (a superuser) and the
    owner's both refuse to build in it, naming its owner, and nothing is built there."""
    names, dsns = roles
    with connect(dsns["squatter"]) as conn:
        conn.execute("CREATE SCHEMA idem")
    for who in ("admin", "owner"):
        proc = idem(dsns[who], "init")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"owned by role {names['squatter']}" in proc.stderr
    with connect(dsns["admin"]) as conn:
        assert conn.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON "
                            "n.oid = c.relnamespace WHERE n.nspname = 'idem'").fetchone() == (0,)


def test_a_squatters_ledger_never_runs_its_code_as_the_administrator(roles, tmp_path):
    """The squatter builds a whole ledger itself and replaces the function prune calls with one
    that makes it a superuser. The administrator (a superuser) then uses that ledger: prune, a
    worker, status, each is refused before any statement of the ledger runs, and the squatter is
    still not a superuser."""
    names, dsns = roles
    assert idem(dsns["squatter"], "init").returncode == 0
    with connect(dsns["squatter"]) as conn:
        conn.execute(EVIL_FUNCTION.format(role=names["squatter"]))
    src = make_source(tmp_path / "src.tif", size=16)
    attempts = [
        idem(dsns["admin"], "prune", "--keep-latest", "--force"),
        idem(dsns["admin"], "status"),
        run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/a.tif"],
            env=env_with(IDEM_LEDGER=dsns["admin"])),
    ]
    for proc in attempts:
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert "superuser" in proc.stderr and names["squatter"] in proc.stderr, proc.stderr
    assert not is_superuser(dsns["admin"], names["squatter"])
    assert not (tmp_path / "a.tif").exists()


@pytest.mark.parametrize("planted", share_keeps(["function", "table", "view"], kept=["function"]))
def test_every_open_refuses_a_ledger_object_another_role_owns(roles, tmp_path, planted):
    """The owner builds the ledger; one object in it then belongs to the squatter (a replaced
    function, a table or a view it was let create). Every open, the owner's own included,
    refuses the ledger, naming the object and its owner; prune never runs the function."""
    names, dsns = roles
    assert idem(dsns["owner"], "init").returncode == 0
    with connect(dsns["owner"]) as conn:
        conn.execute(f"GRANT CREATE, USAGE ON SCHEMA idem TO {names['squatter']}")
    with connect(dsns["squatter"]) as conn:
        if planted == "function":
            conn.execute("CREATE FUNCTION idem.ensure_history_partitions(cutoff timestamptz, "
                         "extra int) RETURNS integer LANGUAGE sql AS 'SELECT 0'")
        elif planted == "table":
            conn.execute("CREATE TABLE idem.extra (a int)")
        else:
            conn.execute("CREATE VIEW idem.extra AS SELECT 1 AS a")
    src = make_source(tmp_path / "src.tif", size=16)
    for proc in (idem(dsns["owner"], "prune", "--keep-latest", "--force"),
                 idem(dsns["owner"], "status"),
                 idem(dsns["owner"], "init"),
                 run(["gdal_translate", "-q", "-of", "IDEM", src, f"/vsiidem/{tmp_path}/a.tif"],
                     env=env_with(IDEM_LEDGER=dsns["owner"]))):
        assert proc.returncode != 0, proc.stdout + proc.stderr
        assert f"owned by role {names['squatter']}" in proc.stderr, proc.stderr
    assert not (tmp_path / "a.tif").exists()


def test_prune_runs_as_the_owner_only_and_its_function_has_a_fixed_search_path(roles):
    """A role that is not the owner (even one the owner let execute the function) cannot prune;
    the owner can. The function is SECURITY INVOKER with search_path pg_catalog, pg_temp."""
    names, dsns = roles
    assert idem(dsns["owner"], "init").returncode == 0
    with connect(dsns["owner"]) as conn:
        conn.execute(f"GRANT USAGE ON SCHEMA idem TO {names['squatter']}")
        conn.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA idem TO {names['squatter']}")
        conn.execute("GRANT EXECUTE ON FUNCTION idem.ensure_history_partitions(timestamptz) "
                     f"TO {names['squatter']}")
        secdef, config = conn.execute(
            "SELECT prosecdef, proconfig FROM pg_proc WHERE proname = "
            "'ensure_history_partitions'").fetchone()
    assert secdef is False and config == ["search_path=pg_catalog, pg_temp"]
    proc = idem(dsns["squatter"], "prune", "--keep-latest", "--force")
    assert proc.returncode != 0 and "owns schema idem" in proc.stderr, proc.stderr
    assert idem(dsns["owner"], "prune", "--keep-latest", "--force").returncode in (0, 1)


def test_a_ledger_an_earlier_build_made_serves_readers_until_the_owners_init(roles, tmp_path):
    """Between an upgrade of gdal-idem and the owner's init, a ledger without migration 0005 (as
    an earlier build leaves it: the function prune calls without its fixed search_path) still
    answers the read-only commands of the owner and of a reader role (a health check must not
    fail for a migration it does not need); the owner's init then applies 0005."""
    names, dsns = roles
    assert idem(dsns["owner"], "init").returncode == 0
    with connect(dsns["owner"]) as conn:
        conn.execute("DELETE FROM idem.schema_version WHERE version = 5")
        conn.execute("ALTER FUNCTION idem.ensure_history_partitions(timestamptz) RESET ALL")
        conn.execute(f"GRANT USAGE ON SCHEMA idem TO {names['squatter']}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA idem TO {names['squatter']}")
    for who in ("owner", "squatter"):
        proc = idem(dsns[who], "--json", "status")
        assert proc.returncode == 0, proc.stderr
    with connect(dsns["owner"]) as conn:
        assert conn.execute("SELECT count(*) FROM idem.schema_version WHERE version = 5"
                            ).fetchone()[0] == 0  # a read-only command migrates nothing
    assert idem(dsns["owner"], "init").returncode == 0
    with connect(dsns["owner"]) as conn:
        assert conn.execute("SELECT count(*) FROM idem.schema_version WHERE version = 5"
                            ).fetchone()[0] == 1
        config = conn.execute("SELECT proconfig FROM pg_proc WHERE proname = "
                              "'ensure_history_partitions'").fetchone()[0]
    assert config == ["search_path=pg_catalog, pg_temp"]


# ---- hostile names ---------------------------------------------------------------------------

HOSTILE = {
    "newline": "default\nx",
    "carriage-return": "default\rx",
    "tab": "a\tb",
    "escape": "a\x1b[31mred",
    "delete": "a\x7fb",
    "100KB": "n" * 100_000,
    "257 bytes": "é" * 128 + "x",
}
# A NUL cannot pass through argv; it reaches IDEM only through the Python API (and GDAL's C
# strings would cut it there: "default\0x" would run as "default").
HOSTILE_PYTHON = dict(HOSTILE, nul="default\x00x")
# Names that are odd but safe (the ledger binds every value): accepted.
ODD_BUT_FINE = ["a\"b'c;d", "ünïcødé", "spaces in name", "n" * 256]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return make_source(tmp_path_factory.mktemp("names") / "src.tif", size=16)


def driver_translate(src, out, ledger, option, value):
    if option == "IDEM_NAMESPACE":
        extra, env = [], env_with(IDEM_LEDGER=ledger, IDEM_NAMESPACE=value)
    else:
        extra, env = ["-co", f"{option}={value}"], env_with(IDEM_LEDGER=ledger)
    return run(["gdal_translate", "-q", "-of", "IDEM", *extra, src, "/vsiidem/" + str(out)],
               env=env)


@pytest.mark.parametrize("name", list(HOSTILE))
@pytest.mark.parametrize("option", share_keeps(["NAMESPACE", "LAYER", "IDEM_NAMESPACE"],
                                               kept=["NAMESPACE"]))
def test_the_driver_refuses_a_hostile_name(tmp_path, source, option, name):
    ledger = "sqlite:" + str(tmp_path / "ledger.sqlite")
    out = tmp_path / "out.tif"
    proc = driver_translate(source, out, ledger, option, HOSTILE[name])
    assert proc.returncode != 0
    assert "control character" in proc.stderr or "bytes long" in proc.stderr, proc.stderr
    assert not out.exists()
    assert not (tmp_path / "ledger.sqlite").exists() or idem_rows(ledger) == 0


def idem_rows(ledger):
    import sqlite3
    conn = sqlite3.connect(ledger[len("sqlite:"):])
    try:
        return conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


@pytest.mark.parametrize("name", ODD_BUT_FINE)
def test_the_driver_takes_odd_but_safe_names(tmp_path, source, name):
    ledger = "sqlite:" + str(tmp_path / "ledger.sqlite")
    out = tmp_path / "out.tif"
    proc = driver_translate(source, out, ledger, "NAMESPACE", name)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and idem_rows(ledger) == 1


PYTHON_CALL = """
import sys
import gdal_idem
field, value = sys.argv[1], bytes.fromhex(sys.stdin.read()).decode()
try:
    gdal_idem.translate(sys.argv[4], sys.argv[3], **{field: value})
except gdal_idem.IdemError as error:
    print(error.kind)
    print(error.message, file=sys.stderr)
    sys.exit(3)
"""


@pytest.mark.parametrize("name", list(HOSTILE_PYTHON))
@pytest.mark.parametrize("field", share_keeps(["namespace", "layer", "tile"], kept=["namespace"]))
def test_the_python_package_refuses_a_hostile_name(tmp_path, source, field, name):
    ledger = "sqlite:" + str(tmp_path / "ledger.sqlite")
    out = tmp_path / "out.tif"
    python_path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               "python")
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", PYTHON_CALL, field, "-", str(source), str(out)],
        input=HOSTILE_PYTHON[name].encode().hex(),
        env=env_with(IDEM_LEDGER=ledger, PYTHONPATH=python_path), capture_output=True,
        text=True, timeout=300)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "usage"
    assert not out.exists()
    assert idem_rows(ledger) == 0


COMMANDS = {
    "status": lambda option, value: ["status", option, value],
    "inflight": lambda option, value: ["inflight", option, value],
    "verify": lambda option, value: ["verify", option, value],
    "export": lambda option, value: ["export", "out.geojson", option, value],
    "forget": lambda option, value: (["forget", "--namespace", "n", "--layer", value]
                                     if option == "--layer" else ["forget", option, value]),
    "prune": lambda option, value: ["prune", "--older-than", "1d", option, value],
    "reap": lambda option, value: ["reap", option, value],
    "load": lambda option, value: ["load", option, value, "--", "ogr2ogr", "PG:dbname=x",
                                   "roads.shp"],
    "key": lambda option, value: ["key", option, value, "--", "ogr2ogr", "PG:dbname=x",
                                  "roads.shp"],
}
COMMAND_OPTIONS = [(command, option) for command in COMMANDS for option in ("--namespace",
                                                                            "--layer")
                   if option == "--namespace" or command in ("status", "inflight", "verify",
                                                             "export", "forget")]


@pytest.mark.parametrize("name", list(HOSTILE) + ["empty"])
@pytest.mark.parametrize("command,option", COMMAND_OPTIONS,
                         ids=[f"{c}{o}" for c, o in COMMAND_OPTIONS])
def test_every_command_refuses_a_hostile_name(tmp_path, command, option, name):
    """Each command's --namespace and --layer: a usage error (exit 2) naming the option, before
    the ledger is opened (no ledger file appears)."""
    ledger = "sqlite:" + str(tmp_path / "ledger.sqlite")
    value = "" if name == "empty" else HOSTILE[name]
    proc = run([GDAL_IDEM, "--ledger", ledger, *COMMANDS[command](option, value)],
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert option in proc.stderr, proc.stderr
    assert not (tmp_path / "ledger.sqlite").exists()
