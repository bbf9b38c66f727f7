"""One owner per spec key: a section's frozen dataclass holds each key's type, default,
bounds and help, and the schema, the dataclass's own check and the CLI options are derived
from it. These tests keep it so: the schema takes exactly the dataclass's keys with its
defaults, and no other module of the package writes a setting's default again."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path
from typing import Any

import pytest

from nnsweep.core.errors import SpecError
from nnsweep.core.fields import REQUIRED, settings_of, value_type
from nnsweep.core.task_data import DataSource, TaskData
from nnsweep.spec import parse_spec
from nnsweep.spec.schema import schema, section_values
from nnsweep.spec.settings import SECTIONS, Bridge, Npu, SearchSpace

PACKAGE = Path(__file__).resolve().parent.parent / "nnsweep"

# A name and value a setting has, used for something else, each with its reason.
NOT_A_SETTING = {
    ("nnsweep/execution/ray_cluster.py", "timeout_s"): "how long a device's probe may take, not one measurement",
    ("nnsweep/models/data_sources.py", "seed"): "a data source's subset seed (data.*.seed), not search.seed",
    ("nnsweep/spec/schema.py", "seed"): "a data source's subset seed (data.*.seed), not search.seed",
}


# A field of a section that the spec file does not give, with its reason.
NOT_IN_THE_FILE = {(TaskData, "base_dir"): "the sweep file's folder, set by nnsweep.spec.build"}


@pytest.mark.parametrize("section", SECTIONS)
def test_every_field_of_a_section_is_a_setting_with_one_default(section: str) -> None:
    cls = SECTIONS[section]
    names = [name for name, *_ in settings_of(cls)]
    fields = [f.name for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_IN_THE_FILE]
    assert names == fields, "give every field its setting(default, help, ...)"
    assert all(default is not REQUIRED for *_, default in settings_of(cls))
    assert all(meta.help for _, _, meta, _ in settings_of(cls))


@pytest.mark.parametrize("section", SECTIONS)
def test_the_schema_takes_exactly_the_keys_of_the_section_with_their_defaults(section: str) -> None:
    cls = SECTIONS[section]
    model = schema().model_fields[section].default_factory
    assert list(model.model_fields) == [meta.key or name for name, _, meta, _ in settings_of(cls)]
    assert section_values(cls, model(), section) == {name: default for name, _, _, default in settings_of(cls)}
    spec = parse_spec({"name": "m", "model": "digits"})
    expected = {"data": None}.get(section, cls())
    assert getattr(spec, section) == expected


@pytest.mark.parametrize("section", SECTIONS)
def test_the_schema_and_the_dataclass_refuse_the_same_bounds(section: str) -> None:
    """Just past each bound: the spec names ``section.key``, the dataclass names the field."""
    cls = SECTIONS[section]
    checked = 0
    for name, annotation, meta, _ in settings_of(cls):
        kind, _ = value_type(annotation)
        listed = typing.get_origin(kind) is tuple
        item = typing.get_args(kind)[0] if listed else kind
        if item not in (int, float, str):
            continue  # a mapping, a nested section, a range: checked in the tests of their keys
        for bad in _past(meta, item):
            key = meta.key or name
            with pytest.raises(SpecError) as in_spec:
                parse_spec({"name": "m", "model": "digits", section: {key: [bad] if listed else bad}})
            assert in_spec.value.field.startswith(f"{section}.{key}")
            with pytest.raises(SpecError) as direct:
                cls(**{name: (bad,) if listed else bad})
            assert direct.value.field == name
            checked += 1
    assert checked >= sum(1 for _, a, *_ in settings_of(cls) if value_type(a)[0] in (int, float, str))


@pytest.mark.parametrize(("key", "value", "said"), [("threads", [2, 2], "twice"), ("group_size", [48], "one of 32")])
def test_a_list_setting_repeats_no_value_and_takes_only_its_choices(key: str, value: list[int], said: str) -> None:
    with pytest.raises(SpecError, match=said) as info:
        parse_spec({"name": "m", "model": "digits", "space": {key: value}})
    assert info.value.field == f"space.{key}"
    with pytest.raises(SpecError, match="without repeats"):
        SearchSpace(**{key: tuple(value)})


def test_a_nested_section_is_built_from_its_settings(tmp_path: Path) -> None:
    spec = parse_spec(
        {"name": "m", "model": "digits", "data": {"evaluation": {"source": "x.npz", "max_samples": 5}}},
        source=tmp_path / "s.yaml",
    )
    assert spec.data == TaskData(DataSource("x.npz", max_samples=5), None, tmp_path)
    with pytest.raises(SpecError) as info:
        parse_spec({"name": "m", "model": "digits", "data": {"evaluation": {"max_samples": 5}}})
    assert info.value.field == "data.evaluation.source"


def _past(meta: Any, kind: Any) -> list[Any]:
    if kind is str:
        return ["", "x" * (meta.max_length + 1)] if meta.max_length else [""]
    step = 1 if kind is int else 1e-9
    out: list[Any] = []
    out += [meta.ge - step] if meta.ge is not None else []
    out += [meta.gt] if meta.gt is not None else []
    out += [meta.le + step] if meta.le is not None else []
    out += [meta.lt] if meta.lt is not None else []
    return out or ["not a value"]


# The entries of a mapping section (bridges.<device>, npus.<device>), each a dataclass of settings.
PARTLY = (Bridge, Npu)


@pytest.mark.parametrize(("section", "cls"), [("bridges", Bridge), ("npus", Npu)])
def test_an_entry_of_a_mapping_section_takes_exactly_its_settings(section: str, cls: type) -> None:
    entry = schema().model_fields[section].annotation.__args__[1]
    assert list(entry.model_fields) == [name for name, *_ in settings_of(cls)]
    assert {k: v.default for k, v in entry.model_fields.items() if k == "repeats"} == (
        {"repeats": Bridge.repeats} if cls is Bridge else {}
    )


def test_a_bridge_is_built_from_its_settings_and_bounded_by_them(tmp_path: Path) -> None:
    given = {"transport": "ssh", "host": "pi@rpi4", "tools": {"torch": "/opt/b"}, "repeats": 3}
    spec = parse_spec({"name": "m", "model": "digits", "bridges": {"host": given}})
    assert spec.bridges["host"] == Bridge(**given) and spec.bridges["host"].target == "pi@rpi4"
    with pytest.raises(SpecError, match="less than or equal to") as info:
        parse_spec({"name": "m", "model": "digits", "bridges": {"host": {"transport": "adb", "repeats": 10**9}}})
    assert info.value.field == "bridges.host.repeats"
    with pytest.raises(SpecError) as direct:
        Bridge("adb", repeats=0)
    assert direct.value.field == "repeats"


def _defaults() -> dict[str, float]:
    """Each numeric setting's name and default, over every section."""
    out: dict[str, float] = {}
    for cls in (*SECTIONS.values(), *PARTLY):
        for name, _, _, default in settings_of(cls):
            if isinstance(default, int | float) and not isinstance(default, bool):
                out[name] = default
    return out


def _is(node: ast.AST | None, default: float) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and node.value == default
    )


def second_defaults(source: str, defaults: dict[str, float]) -> list[str]:
    """Where ``source`` writes a setting's default again: a keyword, an annotated name or a
    parameter of the setting's name given its default, or an option of its name defaulting to it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        pairs: list[tuple[str, ast.AST | None]] = []
        if isinstance(node, ast.keyword) and node.arg:
            pairs.append((node.arg, node.value))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value
            if isinstance(value, ast.Call):  # pydantic's Field(default=...)
                value = next((k.value for k in value.keywords if k.arg == "default"), None)
            pairs.append((node.target.id, value))
        elif isinstance(node, ast.arguments):
            positional = node.posonlyargs + node.args
            pairs += zip(
                (a.arg for a in positional[len(positional) - len(node.defaults) :]), node.defaults, strict=True
            )
            pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=True)]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            flag = str(node.args[0].value).lstrip("-").replace("-", "_")
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            pairs += [(name, default) for name in defaults if name.startswith(flag) and flag]
        found += [
            f"{name} = {defaults[name]} (line {getattr(v, 'lineno', '?')})"
            for name, v in pairs
            if name in defaults and _is(v, defaults[name])
        ]
    return found


def test_no_module_writes_a_setting_default_again() -> None:
    owners = {Path(inspect.getfile(c)).resolve() for c in (*SECTIONS.values(), *PARTLY)}
    defaults = _defaults()
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        hits = [] if path.resolve() in owners else second_defaults(path.read_text(), defaults)
        hits = [h for h in hits if (where, h.split(" =")[0]) not in NOT_A_SETTING]
        if hits:
            found[where] = hits
    assert found == {}, "take the default from the section's dataclass (nnsweep.core.fields.setting)"


def test_the_scan_finds_a_default_written_again() -> None:
    source = (
        "def f(iters: int = 200, *, ci_rel=0.01): ...\n"
        "x = MeasureSettings(warmup=5)\n"
        "class M:\n    remeasure: int = Field(default=3, ge=0)\n"
        "parser.add_argument('--max-duration', type=float, default=10.0)\n"
        "ok = MeasureSettings(warmup=0, iters=1)\n"
    )
    hits = second_defaults(source, _defaults())
    assert sorted(h.split(" =")[0] for h in hits) == ["ci_rel", "iters", "max_duration_s", "remeasure", "warmup"], hits
