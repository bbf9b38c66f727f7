"""The layout of nnsweep.cli: one module per command, each defining its own options and code,
listed once in the COMMANDS table; and the three ways to start the command."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import nnsweep.cli
from nnsweep.cli._args import _SubParser

CLI = importlib.import_module("nnsweep.cli.main")  # the attribute nnsweep.cli.main is the function
ROOT = Path(__file__).resolve().parents[1]
# Modules of nnsweep.cli that are not commands: the entry point and the shared helpers (leading "_").
NOT_COMMANDS = {"main"}


def _command_modules() -> list[str]:
    names = [m.name for m in pkgutil.iter_modules(nnsweep.cli.__path__)]
    return sorted(n for n in names if not n.startswith("_") and n not in NOT_COMMANDS)


def test_every_command_module_defines_add_parser_and_run() -> None:
    for name in _command_modules():
        module = importlib.import_module(f"nnsweep.cli.{name}")
        assert callable(getattr(module, "add_parser", None)), name
        assert callable(getattr(module, "run", None)), name


def test_the_commands_table_names_each_command_module_once() -> None:
    assert sorted(CLI.COMMANDS) == _command_modules()
    assert len(set(map(id, CLI.COMMANDS.values()))) == len(CLI.COMMANDS)


def test_each_module_adds_exactly_its_own_subcommand_and_handler() -> None:
    for name, module in CLI.COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command", parser_class=_SubParser)
        module.add_parser(sub)
        assert list(sub.choices) == [name], name


def test_the_top_parser_lists_the_commands_in_table_order() -> None:
    parser = CLI._build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1 and list(actions[0].choices) == list(CLI.COMMANDS)


def _help(*cmd: str) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH first: a console script installed from another checkout runs this one's package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([*cmd, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_entry_the_console_script_and_python_m_print_the_same_help() -> None:
    script = Path(sys.executable).with_name("nnsweep")
    runs = [
        _help(sys.executable, "-c", "import sys; from nnsweep.cli import entry; sys.argv[0] = 'nnsweep'; entry()"),
        _help(sys.executable, "-m", "nnsweep"),
        _help(sys.executable, "-m", "nnsweep.cli"),  # what the tests and benchmarks run
        # the installed console script (nnsweep.cli:entry); without one, what it runs
        _help(str(script)) if script.is_file() else _help(sys.executable, "-m", "nnsweep"),
    ]
    for done in runs:
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.startswith("usage: nnsweep ") and all(c in done.stdout for c in CLI.COMMANDS)
    assert len({done.stdout for done in runs}) == 1


def test_the_console_script_points_at_entry() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["nnsweep"] == "nnsweep.cli:entry"
    assert "nnsweep.cli" in project["tool"]["setuptools"]["packages"]
