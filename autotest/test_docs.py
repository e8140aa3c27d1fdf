# SPDX-License-Identifier: MIT
"""Every command shown in README.md and docs/*.md runs, against the freshly built plugin.

Convention for fenced code blocks in the docs (indented code blocks are never run):

- ```sh / ```bash: run with `bash -e -o pipefail`; exit status 0 expected.
- ```console: a transcript. Lines starting with `$ ` are commands (a trailing backslash continues
  a command on the next line) and are run like an sh block; the other lines are the output shown
  to the reader and are not compared.
- ```python: run with /usr/bin/python3 (the Python with osgeo.gdal and rasterio).
- Any other tag (text, sql, ini, json, yaml, none...): shown, not run.

Directives in an HTML comment on the line(s) just before the opening fence adjust one block:

- `<!-- doctest: skip REASON -->`: not run (a reason is required: make install, a real
  cluster...).
- `<!-- doctest: compile-only -->`: python that imports what is not installed here (Airflow); it
  is byte-compiled only.
- `<!-- doctest: venv -->`: python run by the tests' venv (tools/pyenv/venv: Prefect, Dagster,
  Dask, with Debian's osgeo.gdal), from a file in the sandbox (`.block_LINE.py`, so that
  `__file__` is set, as Dagster's `reconstructable` needs). Prefect's home, Dagster's home (an
  instance without telemetry) and DO_NOT_TRACK are set inside the sandbox.
- `<!-- doctest: expect TEXT -->` (repeatable): the block's stdout+stderr must contain TEXT.
- `<!-- doctest: exit N -->`: the block must exit with N instead of 0.
- `<!-- doctest: needs postgres -->`: run only with PostgreSQL (scripts/with-postgres, as in
  `make test`, or IDEM_TEST_PG_DSN naming a database of a cluster where the test may create
  databases), with PGDSN naming a fresh database (one per document, with PostGIS).
  Skipped without PostgreSQL, failed if IDEM_TEST_REQUIRE_PG=1.
- `<!-- doctest: needs gdal 3.11 -->`: run only on GDAL 3.11 or later (the `gdal` command line);
  skipped on older GDAL.
- `<!-- doctest: needs s3 -->`: run with a real S3-compatible server on loopback (s3rver,
  tools/s3rver, started once per document) holding a bucket `tiles-bucket`, and GDAL's
  AWS_* settings for it in the environment.

Hidden setup: fenced blocks inside a multi-line HTML comment that opens with
`<!-- doctest: setup REASON` (the comment's own line) are not shown to the reader but run in
their place, like any block, and must exit 0 (no directives: the comment cannot hold another
one). Keep them for what a reader needs no explanation of (a directory, a sample file); show
real steps.
Fenced blocks inside any other HTML comment are ignored.

Nothing that looks like a command may escape the test: `test_docs_every_command_is_run` fails
when an indented code block, or a fenced block of a tag that is not run (text, none, ...), has a
line that looks like a shell command (`$ `, `gdalwarp`, `gdal_translate`, `gdal-idem`, `make `,
`ogr2ogr`, `psql`, `scripts/`, `VAR=value command`...). A command that genuinely cannot run here
(make install, kubectl, a real cluster) goes in an sh block with `<!-- doctest: skip REASON -->`:
that is the only way to show a command that is not run. Usage synopses are shown through the
command's own `--help` (run) or written as prose.

The blocks of one document run in order in one sandbox directory, and what a block exports and
its last working directory carry over to the next blocks (python blocks included), as when a
reader follows the page in one terminal. The sandbox has:

- `scene.tif` (512x512, 3 bands, UTM 33N, 10 m) and `scene2.tif` (a different scene),
- `sql/` and `scripts/` linked from the repository,
- `gdal-idem` and `python3` (/usr/bin/python3) first on PATH, GDAL_DRIVER_PATH set to the build,
  PYTHONPATH to the tree's `python/` (the `gdal_idem` package, unless testing the installed one),
- IDEM_LEDGER=sqlite:<sandbox>/ledger.sqlite and XDG_STATE_HOME inside the sandbox, so nothing
  outside it is touched.

Run alone: IDEM_BUILD_DIR=build /usr/bin/python3 -m pytest autotest/test_docs.py -p no:cacheprovider
"""

import os
import py_compile
import re
import subprocess
import sys

import pytest

from idem_testlib import (BUILD_DIR, GDAL_IDEM, INSTALLED, PLUGIN_DIR, PREFECT_STARTUP_SECONDS,
                          ROOT, gdal_at_least, make_source, share_keeps)

VENV_PYTHON = os.path.join(ROOT, "tools", "pyenv", "venv", "bin", "python")

DOCS = ["README.md"] + sorted(
    os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs"))
    if name.endswith(".md"))

RUN_TAGS = {"sh", "bash", "console", "python"}
BLOCK_TIMEOUT = 120

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_DIRECTIVE = re.compile(r"<!--\s*doctest:\s*(.*?)\s*-->")
_SETUP_OPEN = re.compile(r"<!--\s*doctest:\s*setup\b\s*\S")


class Block:
    def __init__(self, path, line, tag, text, directives):
        self.path = path
        self.line = line
        self.tag = tag
        self.text = text
        self.directives = directives
        self.hidden = False

    def where(self):
        return f"{self.path}:{self.line} ({self.tag})"

    def directive(self, name):
        return [value for key, value in self.directives if key == name]


def parse_blocks(path):
    """Fenced blocks of a Markdown file, with the doctest directives just above each.

    Blocks inside a multi-line `<!-- doctest: setup ... -->` comment are returned with
    hidden=True; blocks inside other HTML comments are dropped."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    pending = []
    comment = None  # None outside a multi-line HTML comment, else "setup" or "other"
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            indent, marker, tag = fence.group(1), fence.group(2), fence.group(3).lower()
            body = []
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(marker):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            if comment in (None, "setup"):
                block = Block(path, i + 1, tag, "\n".join(body) + "\n", pending)
                block.hidden = comment == "setup"
                blocks.append(block)
            pending = []
            i = j + 1
            continue
        if comment is not None:
            if "-->" in line:
                comment = None
            i += 1
            continue
        opening = line.strip()
        if opening.startswith("<!--") and "-->" not in opening:
            comment = "setup" if _SETUP_OPEN.match(opening) else "other"
            pending = []
            i += 1
            continue
        found = _DIRECTIVE.findall(line)
        if found:
            for text in found:
                key, _, value = text.partition(" ")
                pending.append((key, value.strip()))
        elif line.strip():
            pending = []
        i += 1
    return blocks


def console_commands(text):
    """The commands of a console transcript: `$ ` lines, with backslash continuations."""
    commands = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = [line[2:]]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            commands.append("\n".join(command))
        i += 1
    return "\n".join(commands) + "\n"


@pytest.fixture(scope="module")
def sample_sources(tmp_path_factory):
    directory = tmp_path_factory.mktemp("doc-sources")
    scene = make_source(directory / "scene.tif", size=512)
    scene2 = make_source(directory / "scene2.tif", size=512, seed=7,
                         origin=(505120.0, 4650000.0))
    return scene, scene2


def sandbox(tmp_path, sample_sources):
    for source in sample_sources:
        os.link(source, tmp_path / os.path.basename(source))
    for name in ("sql", "scripts"):
        os.symlink(os.path.join(ROOT, name), tmp_path / name)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    os.symlink(GDAL_IDEM, bin_dir / "gdal-idem")
    os.symlink("/usr/bin/python3", bin_dir / "python3")
    os.symlink("/usr/bin/python3", bin_dir / "python")
    env = dict(os.environ)
    env.update({
        "PATH": f"{bin_dir}:{os.path.join(BUILD_DIR, 'src')}:/usr/local/bin:/usr/bin:/bin",
        "GDAL_DRIVER_PATH": PLUGIN_DIR,
        "IDEM_BUILD_DIR": BUILD_DIR,
        "IDEM_LEDGER": "sqlite:" + str(tmp_path / "ledger.sqlite"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "REPO": ROOT,
        "DOCTEST_STATE": str(tmp_path / ".doctest-state"),
        # The orchestrators of `venv` blocks keep their state in the sandbox, and tell no one.
        "PREFECT_HOME": str(tmp_path / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(PREFECT_STARTUP_SECONDS),
        "DAGSTER_HOME": str(tmp_path / ".dagster"),
        "DO_NOT_TRACK": "1",
    })
    (tmp_path / ".dagster").mkdir()
    (tmp_path / ".dagster" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for name in list(env):
        if name.startswith("IDEM_") and name not in ("IDEM_LEDGER", "IDEM_BUILD_DIR",
                                                      "IDEM_TEST_PG_DSN",
                                                      "IDEM_TEST_REQUIRE_PG"):
            del env[name]
    env.pop("PYTHONPATH", None)
    if not INSTALLED:  # the gdal_idem package of this tree, as make install would put it
        env["PYTHONPATH"] = os.path.join(ROOT, "python")
    return env


# Carry exports and the working directory from block to block through a file in the sandbox.
_RESTORE = '[ -f "$DOCTEST_STATE" ] && . "$DOCTEST_STATE"\n'
_SAVE = ("trap '{ export -p | grep -v -e \" OLDPWD\" -e \" PWD=\" -e \" SHLVL=\"; "
         "printf \"cd %q\\n\" \"$PWD\"; } >\"$DOCTEST_STATE\"' EXIT\n")


def run_block(block, cwd, env):
    if block.tag == "python":
        if block.directive("compile-only"):
            source = cwd / f".block_{block.line}.py"
            source.write_text(block.text)
            try:
                py_compile.compile(str(source), doraise=True)
            except py_compile.PyCompileError as error:
                pytest.fail(f"{block.where()} does not compile:\n{error}")
            return None
        if block.directive("venv"):
            source = cwd / f".block_{block.line}.py"
            source.write_text(block.text)
            args = ["bash", "-c", _RESTORE + 'exec "$1" "$2"', "python", VENV_PYTHON, str(source)]
        else:
            args = ["bash", "-c", _RESTORE + 'exec /usr/bin/python3 -c "$1"', "python",
                    block.text]
    else:
        script = console_commands(block.text) if block.tag == "console" else block.text
        args = ["bash", "-e", "-o", "pipefail", "-c", _RESTORE + _SAVE + script]
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT)
    expected_exit = int((block.directive("exit") or ["0"])[0])
    output = proc.stdout + proc.stderr
    if proc.returncode != expected_exit:
        pytest.fail(f"{block.where()} exited {proc.returncode}, expected {expected_exit}\n"
                    f"--- block ---\n{block.text}--- stdout ---\n{proc.stdout}"
                    f"--- stderr ---\n{proc.stderr}")
    for text in block.directive("expect"):
        assert text in output, (f"{block.where()}: expected {text!r} in the output\n"
                                f"--- output ---\n{output}")
    return proc


def has_postgres():
    return bool(os.environ.get("IDEM_TEST_PG_DSN"))


# Docs whose commands take most of a minute, left out of the test matrix's share
# (IDEM_TEST_SHARE=smoke): docs/comparison.md races Prefect flows, docs/recipes.md runs Prefect,
# Dagster and Dask batches (the share runs them through test_orchestrators.py and
# test_package_orchestrators.py).
WHOLE_ONLY_DOCS = {os.path.join("docs", "comparison.md"), os.path.join("docs", "recipes.md")}


@pytest.mark.parametrize("doc", share_keeps(DOCS, kept=[doc for doc in DOCS
                                                        if doc not in WHOLE_ONLY_DOCS]))
def test_docs_commands_run(doc, tmp_path, sample_sources):
    blocks = [b for b in parse_blocks(doc) if b.tag in RUN_TAGS]
    if not blocks:
        pytest.skip(f"{doc} has no runnable blocks")
    env = sandbox(tmp_path, sample_sources)
    skipped_pg = []
    s3_servers = []  # the document's S3 server, started by its first `needs s3` block
    try:
        run_blocks(blocks, tmp_path, env, skipped_pg, s3_servers)
    finally:
        for server in s3_servers:
            server.stop()
    if skipped_pg and len(skipped_pg) == len(blocks):
        pytest.skip("only PostgreSQL blocks, and no PostgreSQL: " + ", ".join(skipped_pg))


def run_blocks(blocks, tmp_path, env, skipped_pg, s3_servers):
    """Run a document's blocks in order; PostgreSQL blocks without PostgreSQL are listed in
    skipped_pg, the S3 server started for `needs s3` blocks is appended to s3_servers."""
    for block in blocks:
        if block.directive("skip"):
            assert block.directive("skip")[0], f"{block.where()}: skip needs a reason"
            continue
        block_env = env
        needs = block.directive("needs")
        if needs and needs[0].startswith("gdal "):
            if not gdal_at_least(needs[0].split()[1]):
                continue
        if block.directive("needs") == ["postgres"]:
            if not has_postgres():
                if os.environ.get("IDEM_TEST_REQUIRE_PG") == "1":
                    pytest.fail("IDEM_TEST_PG_DSN is not set but IDEM_TEST_REQUIRE_PG=1")
                skipped_pg.append(block.where())
                continue
            if "PGDSN" not in env:
                from idem_testlib import pg_fresh_database
                env["PGDSN"] = pg_fresh_database()  # one database per document
            block_env = env
        if block.directive("needs") == ["s3"]:
            if not s3_servers:
                from s3server import S3Server
                s3_servers.append(S3Server(tmp_path / ".s3rver", buckets=["tiles-bucket"]).start())
                env.update(s3_servers[0].config())
            block_env = env
        run_block(block, tmp_path, block_env)


def test_docs_python_blocks_compile():
    """Every python block compiles, including the orchestrator snippets that cannot run here."""
    for doc in DOCS:
        for block in parse_blocks(doc):
            if block.tag == "python":
                try:
                    compile(block.text, block.where(), "exec")
                except SyntaxError as error:
                    pytest.fail(f"{block.where()}: {error}")


# What a shell command looks like at the start of a line: a transcript prompt, a GDAL or
# gdal-idem program, a build or cluster tool, a repository script, or `VAR=value command`.
_COMMAND_LINE = re.compile(
    r"^\s*(\$ |(sudo\s+)?(gdalwarp|gdal_translate|gdal-idem|gdalinfo|gdaladdo|gdalbuildvrt|"
    r"gdaldem|gdal_calc\.py|gdal2tiles\.py|gdaltransform|ogr2ogr|ogrinfo|psql|pg_\w+|make|"
    r"cmake|ctest|xargs|python3?|/usr/bin/python3|kubectl|docker|apt-get|apt|pip3?|prefect|"
    r"dagster|airflow)(\s|$)|scripts/\S|\./\S|([A-Z_][A-Z0-9_]*=\S*\s+)+[a-z./])")


def indented_blocks(path):
    """Indented code blocks (4 spaces or a tab, after a blank line) outside fences and HTML
    comments: (first line number, text)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    found = []
    fence = None
    in_comment = False
    previous_blank = True
    current = None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence:
            if stripped.startswith(fence):
                fence = None
            previous_blank = False
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        opening = _FENCE.match(line)
        if opening:
            fence = opening.group(2)
            current = None
            continue
        if stripped.startswith("<!--") and "-->" not in stripped:
            in_comment = True
            current = None
            continue
        if (line.startswith("    ") or line.startswith("\t")) and stripped and (
                previous_blank or current is not None):
            if current is None:
                current = [number, []]
                found.append(current)
            current[1].append(line)
        elif stripped:
            current = None
        previous_blank = not stripped
    return [(number, "\n".join(text) + "\n") for number, text in found]


def command_lines(text):
    return [line.strip() for line in text.split("\n") if _COMMAND_LINE.match(line)]


def test_docs_every_command_is_run():
    """No shell command in the docs escapes the test: not in an indented block (never run), not
    in a fenced block of a tag that is not run. A command that cannot run here is an sh block
    with `<!-- doctest: skip REASON -->`."""
    problems = []
    for doc in DOCS:
        for number, text in indented_blocks(doc):
            for command in command_lines(text):
                problems.append(f"{doc}:{number}: indented block with a command (never run; "
                                f"use a fenced sh or console block): {command}")
        for block in parse_blocks(doc):
            if block.tag in RUN_TAGS:
                if block.directive("skip") and not block.directive("skip")[0]:
                    problems.append(f"{block.where()}: doctest skip without a reason")
                continue
            for command in command_lines(block.text):
                problems.append(f"{block.where()}: a {block.tag or 'untagged'} block is not "
                                f"run but holds a command: {command}")
    assert not problems, "\n".join(problems)


def test_docs_every_command_is_run_catches_escapes(tmp_path, monkeypatch):
    """The check above finds an indented command, a command in a text block, and accepts run,
    skipped-with-reason and hidden setup blocks."""
    page = tmp_path / "page.md"
    page.write_text("Intro\n\n    gdalwarp a.tif b.tif\n\n```text\n$ gdal-idem status\n```\n\n"
                    "```text\ncompleted:  3\n```\n\n<!-- doctest: skip needs a cluster -->\n"
                    "```sh\nkubectl apply -f job.yaml\n```\n\n<!-- doctest: setup a directory\n"
                    "```sh\nmkdir -p tiles\n```\n-->\n\n- a list\n\n    with a paragraph\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    assert [n for n, t in indented_blocks("page.md") if command_lines(t)] == [3]
    blocks = parse_blocks("page.md")
    assert [(b.tag, b.hidden, bool(command_lines(b.text))) for b in blocks] == [
        ("text", False, True), ("text", False, False), ("sh", False, True), ("sh", True, False)]
    assert blocks[2].directive("skip") == ["needs a cluster"]
    page.write_text("<!-- not a setup\n```sh\ngdalwarp a.tif b.tif\n```\n-->\n")
    assert parse_blocks("page.md") == []


def test_docs_directives_are_known():
    known = {"skip", "compile-only", "venv", "expect", "exit", "needs"}
    for doc in DOCS:
        for block in parse_blocks(doc):
            for key, _ in block.directives:
                assert key in known, f"{block.where()}: unknown doctest directive {key!r}"


def test_docs_readme_links_every_page():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    missing = [doc for doc in DOCS[1:] if f"({doc})" not in readme]
    assert not missing, f"README.md does not link {missing}"


def test_docs_local_links_resolve():
    link = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")
    for doc in DOCS:
        base = os.path.dirname(os.path.join(ROOT, doc))
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
        for target, _ in link.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            assert os.path.exists(os.path.join(base, target)), f"{doc}: broken link {target}"
