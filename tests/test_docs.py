"""The user's reference is checked against the code: every option of every ``nnsweep`` command
is in docs/reference/cli.md, every key of the sweep YAML in docs/reference/spec.md, every
runtime and backend in docs/reference/runtimes.md, and every relative link of the README,
docs/ and benchmarks/results/ leads to a file (and heading) that exists."""

from __future__ import annotations

import argparse
import importlib
import re
import types
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_DOC = ROOT / "docs" / "reference" / "cli.md"
SPEC_DOC = ROOT / "docs" / "reference" / "spec.md"
RUNTIMES_DOC = ROOT / "docs" / "reference" / "runtimes.md"
# The options every command shares (documented once, under "Common to every command").
COMMON = {"-h", "--help", "-v", "--verbose", "--cache-dir"}


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser by its full name (``bench``, ``agent head``), from the real CLI."""
    cli = importlib.import_module("nnsweep.cli.main")  # the attribute nnsweep.cli.main is the function
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if name:
            found[name] = parser
        for action in subs:
            for sub_name, sub in action.choices.items():
                walk(sub, f"{name} {sub_name}".strip())

    walk(cli._build_parser(), "")
    return found


def _sections(doc: str) -> dict[str, str]:
    """The text under each ``## `nnsweep X` `` heading of cli.md, by X."""
    parts = re.split(r"^## `nnsweep ([a-z ]+)`.*$", doc, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_cli_option_of_every_command_is_in_the_cli_reference() -> None:
    sections = _sections(CLI_DOC.read_text(encoding="utf-8"))
    missing = []
    for name, parser in _commands().items():
        if parser._subparsers is not None and name not in sections:
            continue  # a group such as `agent`: its subcommands have the sections
        text = sections.get(name)
        if text is None:
            missing.append(f"a section '## `nnsweep {name}`'")
            continue
        for action in parser._actions:
            for option in action.option_strings:
                if option not in COMMON and f"`{option}" not in text:
                    missing.append(f"nnsweep {name} {option}")
    assert not missing, f"{CLI_DOC.relative_to(ROOT)} does not document: {missing}"


def test_the_common_options_are_documented_once() -> None:
    doc = CLI_DOC.read_text(encoding="utf-8")
    common = doc.split("## Common to every command", 1)[1].split("\n## ", 1)[0]
    assert all(f"`{option}" in common for option in COMMON), common


def _models_in(annotation: typing.Any) -> list[tuple[str, type]]:
    """The pydantic models an annotation holds: ('', M) for M or M | None, ('NAME.', M) for dict[str, M]."""
    if getattr(annotation, "model_fields", None) is not None:
        return [("", annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and args:
        return [("NAME.", model) for prefix, model in _models_in(args[1]) if not prefix]
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:  # Optional[M]; a union of a model and a list is a value's two forms
            return _models_in(present[0])
    return []


def _spec_keys() -> list[str]:
    """Every key of the sweep YAML, dotted (``measure.iters``, ``bridges.NAME.serial``)."""
    from nnsweep.spec.schema import schema

    keys: list[str] = []

    def walk(model: type, prefix: str) -> None:
        for key, info in model.model_fields.items():  # type: ignore[attr-defined]
            path = f"{prefix}{info.alias or key}"
            keys.append(path)
            for inner, nested in _models_in(info.annotation):
                walk(nested, f"{path}.{inner}")

    walk(schema(), "")
    return keys


def test_every_key_of_the_sweep_yaml_is_in_the_spec_reference() -> None:
    doc = SPEC_DOC.read_text(encoding="utf-8")
    keys = _spec_keys()
    assert {"name", "space.runtime", "measure.iters", "bridges.NAME.serial", "npus.NAME.target"} <= set(keys)
    missing = [key for key in keys if f"`{key}`" not in doc]
    assert not missing, (
        f"{SPEC_DOC.relative_to(ROOT)} does not document these keys of the sweep YAML: {missing}; "
        "add a row naming each (as `section.key`) with its values, default and meaning"
    )


def test_the_spec_reference_names_every_example_spec() -> None:
    doc = SPEC_DOC.read_text(encoding="utf-8")
    missing = [p.name for p in sorted((ROOT / "sweeps").glob("*.yaml")) if f"sweeps/{p.name}" not in doc]
    assert not missing, f"{SPEC_DOC.relative_to(ROOT)} does not name: {missing}"


def test_every_runtime_and_backend_is_in_the_runtimes_reference() -> None:
    from importlib import metadata

    from nnsweep.core import runtimes

    doc = RUNTIMES_DOC.read_text(encoding="utf-8")
    plugins = {entry.name for entry in metadata.entry_points(group="nnsweep.runtimes")}
    builtin = [name for name in runtimes.listed_names() if name not in plugins]
    assert len(builtin) >= 5, builtin
    missing = []
    for name in builtin:
        info = runtimes.get(name)
        missing += [name] if f"`{name}`" not in doc else []
        missing += [f"{name} backend {b}" for b in info.backends if f"`{b}`" not in doc]
    assert not missing, f"{RUNTIMES_DOC.relative_to(ROOT)} does not document: {missing}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "device_agents" / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "benchmarks").rglob("*.md"))
    return files


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_every_relative_link_resolves() -> None:
    broken = []
    for source in _markdown_files():
        text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            resolved = (source.parent / path).resolve() if path else source
            if not resolved.exists():
                broken.append(f"{source.relative_to(ROOT)}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{source.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, f"links that lead nowhere: {broken}"


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    pages = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    missing = [page for page in pages if page != "index.md" and f"({page})" not in index]
    assert not missing, f"docs/index.md does not link: {missing}"


def _default_text(value: object) -> str:
    """A default as a spec file writes it."""
    from nnsweep.core.fields import number_text
    from nnsweep.spec.settings import IntRange

    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, IntRange):
        value = tuple(sorted({value.low, value.high}))
    if isinstance(value, tuple):
        return "`[" + ", ".join(str(getattr(v, "value", v)) for v in value) + "]`"
    return number_text(value) if isinstance(value, int | float) else f"`{value}`"


def test_the_spec_reference_gives_each_setting_its_own_default() -> None:
    """A section's defaults are its dataclass's (nnsweep.spec.settings.SECTIONS): the table's
    default column says each as a spec file writes it (an absent or empty one may be said in words)."""
    from nnsweep.core.fields import settings_of
    from nnsweep.spec.settings import SECTIONS

    doc = SPEC_DOC.read_text(encoding="utf-8")
    wrong = []
    for section, cls in SECTIONS.items():
        for field, _, meta, default in settings_of(cls):
            name = meta.key or field
            row = re.search(rf"^\| `{section}\.{name}` \|[^|]*\| ([^|]*) \|", doc, re.MULTILINE)
            said = row.group(1).strip() if row else ""
            explained = (default is None or default == {}) and not said.startswith("`")  # e.g. "the model's own"
            if row is None or (said != _default_text(default) and not explained):
                wrong.append(
                    f"{section}.{name}: {row.group(1).strip() if row else 'no row'} != {_default_text(default)}"
                )
    assert not wrong, f"{SPEC_DOC.relative_to(ROOT)}: {wrong}"
