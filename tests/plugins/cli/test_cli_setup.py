"""The first minutes: building roost says nothing about our own packaging, ``make run``
installs the runtime only, every ``roost`` command the README shows parses, and
``roost run`` prints an IDE config that starts ``roost`` without the shell's PATH."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import http_fakes as fakes  # loaded by this folder's conftest
import pytest
import trio
from roost.plugins.cli import build_parser
from roost.plugins.cli._commands import run_command

ROOT = Path(__file__).parents[3]

# setuptools' note on every editable install of a layout that is not src/ or flat (ours maps
# kernel/ → roost.kernel): informational, not about our configuration; `make` filters it.
SETUPTOOLS_NOTES = ("Editable installation.",)

BUILD = textwrap.dedent(
    """
    import contextlib, io, json, sys, warnings
    from setuptools import build_meta

    out = sys.argv[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            built = [build_meta.build_sdist(out), build_meta.build_wheel(out),
                     build_meta.build_editable(out)]
    print(json.dumps({"built": built,
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
    """
)


@pytest.mark.slow
def test_building_roost_emits_no_warnings_about_our_packaging(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip("building roost needs setuptools >= 77 (pyproject's build-system says so)")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "agent.json.schema"):
        shutil.copy(ROOT / name, source / name)
    for name in ("kernel", "plugins", "agents"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [w for w in result["warnings"] if not any(note in w for note in SETUPTOOLS_NOTES)]
    assert ours == [], "\n\n".join(w[:600] for w in ours)
    wheel = next(
        out / name for name in result["built"] if name.endswith(".whl") and "editable" not in name
    )
    names = set(zipfile.ZipFile(wheel).namelist())
    for agent in ("coordinator", "reviewer", "worker"):  # the bundled agents ship as data
        assert f"roost/agents/{agent}/agent.json" in names
    assert "roost/kernel/agent.json.schema" in names and "roost/plugins/cli/__init__.py" in names


def readme_commands() -> list[str]:
    """Every ``roost …`` line in the README's code blocks, comments removed."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            if line.startswith("roost "):
                commands.append(line)
    return commands


def test_every_roost_command_in_the_readme_parses():
    commands = readme_commands()
    assert len(commands) >= 9, commands
    for command in commands:
        words = shlex.split(command, comments=True)[1:]
        # `[--opt VALUE]` marks an optional part: the line must parse with and without them
        bare = shlex.split(re.sub(r"\[[^\]]*\]", "", command), comments=True)[1:]
        full = [w for w in (word.strip("[]") for word in words) if w]
        for argv in (bare, full):
            try:
                build_parser().parse_args(argv)
            except SystemExit:
                pytest.fail(f"README: `{command}` does not parse as `roost {shlex.join(argv)}`")


def test_readme_puts_roost_on_path_before_its_first_roost_command():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    first = next(i for i, b in enumerate(blocks) if re.search(r"^roost ", b, flags=re.M))
    before = "\n".join(blocks[: first + 1]).split("\nroost ")[0]
    assert re.search(r"^(\. |source )\.venv/bin/activate|PATH=.*\.venv/bin", before, flags=re.M), (
        "a new shell has no roost on PATH: say how to get it before the first `roost` command"
    )


def make_dry_run(project: Path, target: str) -> str:
    done = subprocess.run(
        ["make", "-n", target], cwd=project, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_installs_runtime_dependencies_only_and_each_extras_set_once(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tests" / "conformance").mkdir(parents=True)
    (tmp_path / "tests" / "conformance" / "install.sh").write_text("")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)

    run = make_dry_run(tmp_path, "run")
    installs = [line for line in run.splitlines() if "pip" in line and " install " in line]
    assert installs and all("[" not in line and "requirements-" not in line for line in installs), (
        run
    )
    assert re.search(r"pip .*install -e \.(\s|$)", run), run

    # what `make run` leaves behind: `make test` then adds the test extras, nothing else
    stamps = re.findall(r"touch (\S+)", run)
    for stamp in stamps:
        (tmp_path / stamp).touch()
    test = make_dry_run(tmp_path, "test")
    assert (
        "install -e" not in test
        and "requirements-test.txt" in test
        and "requirements-lint" not in test
    ), test
    for stamp in re.findall(r"touch (\S+)", test):
        (tmp_path / stamp).touch()
    again = make_dry_run(tmp_path, "run") + make_dry_run(tmp_path, "test")
    assert not re.search(r"pip .*install", again), (
        again
    )  # switching back and forth installs nothing


async def test_roost_run_prints_an_ide_config_that_starts_roost_without_path(fake_config, tmp_path):
    config = fake_config()
    out = io.StringIO()
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: run_command(
                config,
                host="127.0.0.1",
                port=0,
                out=out,
                err=io.StringIO(),
                open_kernel=fakes.open_fake_kernel,
                stop=stop.wait,
                task_status=task_status,
            )
        )
        stop.set()
    lines = [line for line in out.getvalue().splitlines() if "IDE config" in line]
    assert len(lines) == 1, out.getvalue()
    entry = json.loads(lines[0].split(": ", 1)[1])
    command = entry["command"]
    assert os.path.isabs(command) and os.access(command, os.X_OK), entry
    assert entry["args"] == ["mcp"]
    assert entry["env"] == {"ROOST_HOME": str(config.home)}  # not the default home
    # as an IDE starts it: no shell, no activated venv, a bare PATH
    with trio.fail_after(60):
        done = await trio.run_process(
            [command, "version"],
            env={"PATH": "/usr/bin:/bin", **entry["env"]},
            capture_stdout=True,
            check=False,
        )
    assert done.returncode == 0 and done.stdout.startswith(b"roost ")
