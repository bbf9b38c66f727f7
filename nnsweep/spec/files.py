"""Reading a sweep file: bounded, alias-bomb-safe YAML, and text files named by a spec."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nnsweep.core.errors import SpecError, clip, excerpt
from nnsweep.spec.build import parse_spec
from nnsweep.spec.settings import SweepSpec

__all__ = ["load_spec", "load_yaml", "read_text"]

_MAX_NODES = 100_000  # values in a YAML document once aliases are expanded: an alias bomb is refused


def read_text(path: Path, field: str) -> str:
    """The UTF-8 text of a file the user named in ``field``.

    Raises:
        SpecError: the file is missing, unreadable, or not UTF-8 (naming the byte offset).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(field, f"file {excerpt(str(path))} does not exist") from None
    except IsADirectoryError:
        raise SpecError(field, f"{excerpt(str(path))} is a directory, not a file") from None
    except OSError as exc:
        raise SpecError(field, f"cannot read {excerpt(str(path))}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(field, f"{excerpt(str(path))} is not UTF-8 text (byte {exc.start})") from None


def _yaml_loader() -> Any:
    """PyYAML's safe loader, refusing duplicate keys and alias bombs."""
    import yaml
    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode

    class Loader(yaml.SafeLoader):
        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None and _expanded_size(node, {}) > _MAX_NODES:
                raise yaml.YAMLError(f"expands to more than {_MAX_NODES:,} values (aliases: *name)")
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        duplicate = key in seen
                        seen.add(key)
                    except TypeError:
                        continue  # an unhashable key: construct_mapping reports it
                    if duplicate:
                        raise ConstructorError(None, None, f"duplicate key {excerpt(key)}", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    return Loader


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """How many values ``node`` becomes once every alias is expanded (memoised per node)."""
    key = id(node)
    if key not in sizes:
        sizes[key] = 1  # a cycle counts once; PyYAML's constructor rejects what it cannot build
        children = node.value if isinstance(node.value, list) else []
        total = 1
        for child in children:
            for item in child if isinstance(child, tuple) else (child,):
                total += _expanded_size(item, sizes)
                if total > _MAX_NODES:
                    break
        sizes[key] = total
    return sizes[key]


def load_yaml(path: Path, field: str) -> Any:
    """Parse a YAML (or JSON) file the user named in ``field``: UTF-8, no duplicate keys,
    no alias bombs.

    Raises:
        SpecError: the file is missing, not UTF-8 or not valid YAML (with the line and column).
    """
    import yaml

    text = read_text(path, field)
    try:
        return yaml.load(text, Loader=_yaml_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(field, f"{clip(path, 200)} is not valid YAML{where}: {clip(problem, 120)}") from None
    except RecursionError:
        raise SpecError(field, f"{excerpt(str(path))} nests too deeply") from None


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and validate a sweep YAML file (a path, or a string naming one).

    The sweep's state (its Optuna journal) lives in ``.nnsweep/<name>`` beside the
    file, so running the same spec from another directory resumes the same sweep.

    Raises:
        SpecError: the file is missing, is not YAML, or does not validate.
    """
    path = Path(path)
    data = load_yaml(path, "spec")
    return parse_spec(data, source=path.resolve())
