"""The layout is the architecture: no import cycles, each layer imports only the layers
below it, and no module or function grows past the size a reader takes in at once.

Imports are read from the source (an AST walk), function-level imports included;
imports under ``if TYPE_CHECKING:`` are type annotations only and do not count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nnsweep.core import metrics, runtimes

PACKAGE = Path(__file__).resolve().parent.parent / "nnsweep"
DASHBOARDS = PACKAGE.parent / "dashboards"

# Lowest first. A module may import its own layer and the layers before it.
LAYERS = (
    "core",
    "models",
    "spec",
    "bench",
    "runtimes",
    "convert",
    "artifacts",
    "sensitivity",
    "agents",
    "execution",
    "tracking",
    "sweep",
    "dashboards",
    "report",
    "api",
    "cli",
    "__main__",
)

# Modules that sit above their package's layer, each with its reason.
ABOVE_THEIR_LAYER = {
    # A preview script (python -m nnsweep.dashboards.sample): it renders a whole report.
    "nnsweep.dashboards.sample": "report",
}
# A runtime folder's pieces that plug into a higher layer sit in that layer: they are
# reached only through the registry's "module:attribute" hooks, never imported from below.
RUNTIME_PIECE_LAYERS = {
    "sensitivity": "sensitivity",  # its layer ranking's evaluator (nnsweep.sensitivity.rank's scores)
    "device_tool": "agents",  # its benchmark tool for a bridge agent (nnsweep.agents' DeviceTool)
}

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 250  # a class longer than this owns two things: give the second its own
# Longer on purpose, each with its reason.
LONG_FUNCTIONS = {
    # The pydantic schema: one class per spec section, defined inside a function so that
    # pydantic is imported only when a spec is parsed.
    "nnsweep/spec/schema.py:schema",
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    for path in sorted(DASHBOARDS.glob("*.py")):
        stem = path.stem
        found["nnsweep.dashboards" + ("" if stem == "__init__" else "." + stem)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_a_new_cycle_is_caught() -> None:
    graph = _graph()
    graph["nnsweep.core.errors"] = {*graph["nnsweep.core.errors"], "nnsweep.core.config"}
    assert any({"nnsweep.core.config", "nnsweep.core.errors"} <= set(c) for c in _cycles(graph))


def _layer_of(module: str) -> str | None:
    """The layer ``module`` sits in: its package's, or one above it (:data:`ABOVE_THEIR_LAYER`,
    :data:`RUNTIME_PIECE_LAYERS`)."""
    parts = module.split(".")
    if parts[1:2] == ["runtimes"] and len(parts) == 4 and parts[3] in RUNTIME_PIECE_LAYERS:
        return RUNTIME_PIECE_LAYERS[parts[3]]
    return ABOVE_THEIR_LAYER.get(module, _layer(module))


def test_each_layer_imports_only_layers_below_it() -> None:
    upward = []
    for module, targets in _graph().items():
        layer = _layer_of(module)
        if layer is None:  # the package's own __init__: the vocabulary only
            assert all(_layer(t) == "core" for t in targets), (module, targets)
            continue
        assert layer in LAYERS, f"{module}: add its package to LAYERS, in its place"
        for target in targets:
            other = _layer_of(target) if _layer(target) is not None else None
            if other is not None and LAYERS.index(other) > LAYERS.index(layer):
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_core_imports_nothing_else_of_nnsweep() -> None:
    for module, targets in _graph().items():
        if _layer(module) == "core":
            assert all(_layer(t) == "core" for t in targets), (module, targets)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    text = path.read_text()
    where = str(path.relative_to(PACKAGE.parent))
    assert len(text.splitlines()) <= MAX_MODULE_LINES, f"{where}: split it by what it owns"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if f"{where}:{node.name}" not in LONG_FUNCTIONS:
                assert length <= MAX_FUNCTION_LINES, f"{where}:{node.name} has {length} lines"
        elif isinstance(node, ast.ClassDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            assert length <= MAX_CLASS_LINES, f"{where}:{node.name} has {length} lines: split what it owns"


# Each built-in runtime lives in nnsweep/runtimes/<name>/: the registry names each of its
# pieces by "module:attribute" there; only what several runtimes share is in runtimes/common.
BUILTIN_RUNTIMES = tuple(runtimes._BUILTIN)
HOOKS = ("converter", "runner", "probe", "sensitivity", "failure_detail", "device_tool")

# Modules outside nnsweep/runtimes/ that name a built-in runtime in a comparison, a lookup
# or a mapping's key, each with its reason.
NAME_BRANCHES = {
    "nnsweep/core/runtimes.py": "the registry: the one line per built-in runtime",
    "nnsweep/models/_bundle.py": "the torch package (a module's or value's origin), not the runtime",
    "nnsweep/bench/_warm.py": "the torch package (forking after it is imported), not the runtime",
    "nnsweep/agents/_npu.py": "the Ethos-U estimate is ExecuTorch's Arm backend: its runtime is executorch",
    "nnsweep/cli/devices.py": "ONNX Runtime's u8s8 saturation on x86 without VNNI (core/options.py SATURATION)",
    "nnsweep/cli/_bench_notes.py": "ONNX Runtime's u8s8 saturation on x86 without VNNI (core/options.py SATURATION)",
    "nnsweep/sweep/accepted.py": "ONNX Runtime's u8s8 saturation on x86 without VNNI (core/options.py SATURATION)",
    "nnsweep/sweep/space.py": "the fp32 baseline is torch eager when the space holds torch",
    "nnsweep/spec/build.py": "a bridge's tools are checked by name; RuntimeInfo.device_tool is the list",
}


def _module_file(reference: str) -> Path:
    module = reference.partition(":")[0]
    path = PACKAGE.parent / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@pytest.mark.parametrize("name", BUILTIN_RUNTIMES)
def test_each_builtin_runtime_lives_in_its_folder(name: str) -> None:
    folder = PACKAGE / "runtimes" / name
    assert runtimes._BUILTIN[name] == f"nnsweep.runtimes.{name}.info:INFO"
    info = runtimes.get(name)
    hooks = {hook: getattr(info, hook) for hook in HOOKS if getattr(info, hook)}
    assert {"converter", "runner", "probe", "sensitivity"} <= set(hooks)
    for hook, reference in hooks.items():
        assert reference.startswith(f"nnsweep.runtimes.{name}."), (hook, reference)
        assert _module_file(reference).parent == folder and _module_file(reference).is_file(), (hook, reference)


def test_the_builtin_runtimes_are_the_five() -> None:
    assert BUILTIN_RUNTIMES == ("executorch", "onnxruntime", "torch", "litert", "armnn")


def test_no_runtime_code_is_left_in_the_old_folders() -> None:
    assert [p.name for p in (PACKAGE / "convert").glob("*.py")] == ["__init__.py"]  # the plug-ins' contract
    assert not (PACKAGE / "bench" / "runners").exists()
    assert (PACKAGE / "runtimes" / "ethosu" / "converter.py").is_file()


def _name_branches(source: str) -> list[str]:
    """Where ``source`` compares with, looks up or keys a mapping by a built-in runtime's name."""

    def names(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value} & set(BUILTIN_RUNTIMES)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return set().union(*(names(e) for e in node.elts))
        return set()

    found = []
    for node in ast.walk(ast.parse(source)):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            operands = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            operands = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            operands = node.args[:1]
        if any(names(o) for o in operands):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_outside_the_runtimes_branches_on_a_runtime_name() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE.parent))
        if not where.startswith("nnsweep/runtimes/") and (lines := _name_branches(path.read_text())):
            found[where] = lines
    unexplained = [f"{where}:{line}" for where, lines in found.items() if where not in NAME_BRANCHES for line in lines]
    assert unexplained == [], "name the runtime's RuntimeInfo hook instead, or add the module with its reason"
    assert sorted(found) == sorted(NAME_BRANCHES), "an allowed module no longer branches: take it off the list"


def test_a_branch_on_a_runtime_name_is_caught() -> None:
    source = 'def f(runtime, peaks):\n    return runtime in ("onnxruntime", "x") or peaks.get("torch")\n'
    assert len(_name_branches(source)) == 2
    # prose and plain values are not branches
    assert _name_branches('"""Converts for torch."""\nNAME = "litert"\n') == []


# A metric's name and its derived keys are spelt in nnsweep.core.metrics only. The strings
# that look like one but are not the metric, each with its reason.
METRIC_LITERALS = {
    ("nnsweep/artifacts/cache.py", "size_bytes"): "a field of the cache's meta.json: a file format, not the metric",
}
_DERIVED = (metrics.drop, metrics.remeasured, metrics.low, metrics.high, metrics.swept, metrics.coverage)


def _metric_literals(source: str) -> list[str]:
    """Where ``source`` spells a built-in metric's name or a derived key, or builds one with an f-string."""
    names = set(metrics.BUILTIN) | {f(m) for m in metrics.BUILTIN for f in _DERIVED}
    suffixes = tuple(f("") for f in _DERIVED)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in names:
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            for before, part in zip(node.values, node.values[1:], strict=False):
                tail = re.findall(r"^\w*", str(part.value))[0] if isinstance(part, ast.Constant) else ""
                if isinstance(before, ast.FormattedValue) and tail in suffixes:
                    found.append(ast.unparse(node))
    return found


def test_metric_names_are_spelt_only_in_the_metric_table() -> None:
    found = set()
    for path in sorted([*PACKAGE.rglob("*.py"), *DASHBOARDS.glob("*.py")]):
        where = str(path.relative_to(PACKAGE.parent))
        if where != "nnsweep/core/metrics.py":
            found.update((where, literal) for literal in _metric_literals(path.read_text()))
    unexplained = sorted(found - set(METRIC_LITERALS))
    assert unexplained == [], "use nnsweep.core.metrics' constants and key functions, or add the string with its reason"
    assert sorted(found) == sorted(METRIC_LITERALS), "an allowed string is gone: take it off the list"


def test_a_metric_literal_is_caught() -> None:
    source = 'def f(m, name):\n    return m["latency_p50_ms"], m.get("accuracy_drop"), m[f"{name}_lo"]\n'
    assert sorted(_metric_literals(source)) == ["accuracy_drop", "f'{name}_lo'", "latency_p50_ms"]
    # other keys, and prose that mentions a metric, are not metric names
    assert _metric_literals('"""The latency_p50_ms of a trial."""\nX = {"threads": 1, "label": f"{x}_low"}\n') == []


# A package's private modules (``_name``) are its own: what another package needs is
# exported by the package. The exceptions, each with its reason.
PRIVATE_IMPORTS = {
    # A runtime's device tool is agents-layer code kept in its runtime's folder: it shares the
    # tool parsers' helpers (numbers, output tails), which are no public API of nnsweep.agents.
    ("nnsweep.runtimes.litert.device_tool", "nnsweep.agents._tools"): "the tool parsers' helpers",
    ("nnsweep.runtimes.torch.device_tool", "nnsweep.agents._tools"): "the tool parsers' helpers",
}


def _private_imports(module: str, source: str) -> set[str]:
    """The private modules of other packages that ``module`` imports."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and i > 0), None)
            if parts[0] == "nnsweep" and private is not None:
                owner = ".".join(parts[:private])
                if not (module + ".").startswith(owner + "."):
                    found.add(target)
    return found


def test_no_package_imports_another_packages_private_modules() -> None:
    found = {(name, target) for name, path in _modules().items() for target in _private_imports(name, path.read_text())}
    unexplained = sorted(found - set(PRIVATE_IMPORTS))
    assert unexplained == [], "export the name from the package's __init__, or add the import with its reason"
    assert sorted(found) == sorted(PRIVATE_IMPORTS), "an allowed import is gone: take it off the list"


def test_a_private_import_across_packages_is_caught() -> None:
    source = "from nnsweep.models._bundle import x\nfrom nnsweep.bench._runner import Runner\nimport nnsweep.bench\n"
    assert _private_imports("nnsweep.runtimes.torch.runner", source) == {
        "nnsweep.models._bundle",
        "nnsweep.bench._runner",
    }
    assert _private_imports("nnsweep.bench._harness", source) == {"nnsweep.models._bundle"}  # its own package's: fine


# A docstring says what and why in a few lines; history lives in git, figures in benchmarks/results/.
MAX_DOCSTRING_LINES = 15
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def long_docstrings(source: str, limit: int = MAX_DOCSTRING_LINES) -> list[tuple[int, int, str]]:
    """``(lines, line number, owner)`` of each module, class or function docstring over ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        doc = ast.get_docstring(node, clean=True) if isinstance(node, _DOCUMENTED) else None
        if doc is not None and len(doc.splitlines()) > limit:
            found.append((len(doc.splitlines()), node.body[0].lineno, getattr(node, "name", "<module>")))
    return found


def test_no_docstring_is_longer_than_a_few_lines() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {owner} ({lines} lines)"
        for path in sorted(PACKAGE.rglob("*.py"))
        for lines, line, owner in long_docstrings(path.read_text())
    ]
    assert found == [], f"cut these to what and why in at most {MAX_DOCSTRING_LINES} lines"


def test_a_long_docstring_is_caught() -> None:
    body = "\n".join(["x"] * (MAX_DOCSTRING_LINES + 1))
    source = f'"""{body}"""\n\nclass A:\n    """Short."""\n\n    def f(self):\n        """{body}"""\n'
    over = MAX_DOCSTRING_LINES + 1
    assert long_docstrings(source) == [(over, 1, "<module>"), (over, MAX_DOCSTRING_LINES + 7, "f")]


# What the code cites of the repository's documentation must be there to read.
_CITED_DOC = re.compile(r"(?<![\w/.])((?:docs|benchmarks/results)/[\w./-]*\w)")


def cited_docs(source: str) -> set[str]:
    """The ``docs/...`` and ``benchmarks/results/...`` paths ``source`` cites."""
    return set(_CITED_DOC.findall(source))


def test_every_doc_the_code_cites_exists() -> None:
    missing = sorted(
        f"{path.relative_to(PACKAGE.parent)}: {cited}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for cited in cited_docs(path.read_text())
        if not (PACKAGE.parent / cited).exists()
    )
    assert missing == [], "cite the document where it lives now"


def test_a_cited_doc_is_found() -> None:
    source = '"""See docs/how-to/team-mode.md.\n"""\n# (benchmarks/results/search.md), not docs/\nU = "x.org/docs/a"\n'
    assert cited_docs(source) == {"docs/how-to/team-mode.md", "benchmarks/results/search.md"}
