"""The input boundary, property-tested: any spec, any `bench` arguments -> exit 0 or 2, one line, no traceback.

Hypothesis generates sweep specs (a valid spec with fields replaced by arbitrary
values, unknown keys, duplicate keys, non-UTF-8 bytes) and `nnsweep bench`
argument sets (valid and invalid values for every option, a `--config` file).
Each runs through :func:`nnsweep.cli.main` in-process, in a fresh temporary
folder. What must hold: the exit code is 0 or 2, stderr carries no traceback,
an exit 2 is one line starting ``nnsweep`` and leaves the folder exactly as it
was (nothing written: no cache, no state, no database).

Only the input boundary is under test, so the work after it is replaced by
stubs (an accepted spec does not start a sweep; accepted bench arguments do not
convert a model): ``Sweep`` and ``_publish_report`` for `run`, ``_execute_bench``
for `bench`. Everything before them — parsing, validation, file reading,
the storage check — is the real code.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnsweep.cli import main

SPEC_EXAMPLES = 600
BENCH_EXAMPLES = 600

BASE_SPEC: dict[str, Any] = {
    "name": "prop",
    "model": "digits",
    "devices": ["host"],
    "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
    "constraints": {"max_accuracy_drop": 0.01},
    "space": {
        "runtime": ["executorch", "onnxruntime"],
        "quant": ["fp32", "static_int8"],
        "backends": {"executorch": ["xnnpack", "portable"]},
        "max_delegated_partitions": [0, 1],
        "min_nodes_per_partition": {"low": 1, "high": 4},
        "threads": [1, 2],
    },
    "budget": {"trials": 4, "timeout_s": 60},
    "measure": {"warmup": 1, "iters": 10, "min_duration_s": 0, "timeout_s": 60},
    "storage": "journal",
}

# Every place a value can go, as a path into BASE_SPEC (a missing leaf is added).
PATHS: list[tuple[str, ...]] = [
    ("name",),
    ("model",),
    ("weights",),
    ("input_shape",),
    ("devices",),
    ("objectives",),
    ("constraints", "max_accuracy_drop"),
    ("constraints", "min_sqnr_db"),
    ("space", "runtime"),
    ("space", "quant"),
    ("space", "granularity"),
    ("space", "calibration"),
    ("space", "interface"),
    ("space", "backends"),
    ("space", "backends", "executorch"),
    ("space", "max_delegated_partitions"),
    ("space", "min_nodes_per_partition"),
    ("space", "min_nodes_per_partition", "low"),
    ("space", "threads"),
    ("budget", "trials"),
    ("budget", "timeout_s"),
    ("measure", "warmup"),
    ("measure", "iters"),
    ("measure", "min_duration_s"),
    ("measure", "timeout_s"),
    ("tracking",),
    ("tracking", "experiment"),
    ("storage",),
    ("bridges",),
    ("npus",),
    ("surprise",),
]

NASTY_TEXT = st.sampled_from(
    [
        "",
        " ",
        "-oProxyCommand=touch pwned",
        "host\n",
        "prop\n",
        "x" * 200,
        "digits",
        "executorch",
        "fp32",
        ".inf",
        "nan",
        "1e26",
        "true",
        "javascript:alert(1)",
        "nosuch://db",
        "sqlite:///nodir/x.db",
        "sqlite://",
        "journal",
        "file.py:build",
        "torchvision:resnet18",
        "é\u202e\u0000",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    NASTY_TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.text(max_size=10), NASTY_TEXT), inner, max_size=3)
    ),
    max_leaves=8,
)


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    target = data
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value


@st.composite
def spec_texts(draw: st.DrawFn) -> bytes:
    """A spec file's bytes: the base spec with a few fields replaced, sometimes broken as text."""
    import copy

    data = copy.deepcopy(BASE_SPEC)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        _set(data, draw(st.sampled_from(PATHS)), draw(VALUES))
    text = yaml.safe_dump(data, allow_unicode=True).encode("utf-8")
    damage = draw(st.sampled_from(["none", "none", "none", "duplicate", "latin1", "truncate", "alias"]))
    if damage == "duplicate":
        text += b"name: again\n"
    elif damage == "latin1":
        text = text.replace(b"prop", b"pr\xf6p", 1) + b"# caf\xe9\n"
    elif damage == "truncate":
        text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
    elif damage == "alias":
        text += b"x: &a [1, 1, 1, 1, 1, 1, 1, 1]\n" + b"".join(
            f"x{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 8)}]\n".encode() for i in range(7)
        )
    return text


def _bench_option() -> st.SearchStrategy[list[str]]:
    numbers = st.sampled_from(["0", "1", "2", "-5", "200", "1e29", "inf", "nan", "-inf", "0.5", "x", "", "99999999999"])
    return st.one_of(
        st.tuples(
            st.just("--runtime"), st.sampled_from(["executorch", "onnxruntime", "torch", "litert", "tflite", ""])
        ),
        st.tuples(
            st.just("--backends"), st.sampled_from(["xnnpack,portable", "cpu", "x86", "gpu", ",", "xnnpack,xnnpack"])
        ),
        st.tuples(
            st.just("--quant"), st.sampled_from(["fp32", "fp16", "dynamic_int8", "static_int8", "qat_int8", "int4"])
        ),
        st.tuples(st.just("--granularity"), st.sampled_from(["per_tensor", "per_channel", "per_row"])),
        st.tuples(st.just("--calibration"), st.sampled_from(["minmax", "histogram", "entropy", "percentile", "max"])),
        st.tuples(st.just("--interface"), st.sampled_from(["core", "full", "half"])),
        st.tuples(
            st.sampled_from(["--calibration-batches", "--qat-epochs", "--max-partitions", "--min-nodes"]), numbers
        ),
        st.tuples(st.sampled_from(["--threads", "--warmup", "--iters", "--min-duration", "--timeout"]), numbers),
        st.tuples(st.just("--input-shape"), st.sampled_from(["1,3,8,8", "1,x", "1,100000,100000,100000", "0", ""])),
        st.tuples(
            st.just("--model"),
            st.sampled_from(["digits", "digits_gn", "nosuch", "pkg.mod:fn", "missing.py:f", "torchvision:x", "-x", ""]),
        ),
        st.tuples(st.just("--weights"), st.sampled_from(["missing.pt", ""])),
        st.tuples(st.just("--config"), st.sampled_from(["config.yaml", "missing.yaml"])),
        st.tuples(st.sampled_from(["--json", "-v"])),
        st.tuples(st.just("--cache-dir"), st.just("CACHE")),
        st.tuples(st.sampled_from(["--bogus", "extra"])),
    ).map(list)


CONFIGS = st.one_of(
    st.just(b"runtime: onnxruntime\nquant: {mode: static_int8, granularity: per_tensor}\n"),
    st.just(b"config: {runtime: torch, backends: [x86]}\n"),
    st.just(b"runtime: torch\nbackends: 5\n"),
    st.just(b"runtime: [1]\n"),
    st.just(b"a: 1\na: 2\n"),
    st.just(b"\xff\xfe\x00"),
    VALUES.map(lambda v: yaml.safe_dump({"runtime": "torch", "quant": v}).encode()),
    VALUES.map(lambda v: yaml.safe_dump(v).encode()),
)


class _Stub:
    """What replaces the sweep: it accepts the spec and runs nothing."""

    def __init__(self, spec: Any, executor: Any, tracker: Any, cache_dir: Any, **kwargs: Any) -> None:
        self.spec = spec

    def run(self) -> list[Any]:
        return []

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # stop(), and whatever the coordinator grows next


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    before = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="nnsweep-boundary-") as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
        finally:
            os.chdir(before)


def _call(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(argv)
    return code, err.getvalue()


def _check(code: int, err: str, folder: Path, before: set[str]) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("nnsweep"), err
        assert len(err) < 1000, err
        assert {p.name for p in folder.iterdir()} == before, err  # nothing written


@pytest.fixture
def stubs(monkeypatch: pytest.MonkeyPatch) -> None:
    import nnsweep.cli._report_file
    import nnsweep.cli.bench
    import nnsweep.sweep.loop

    monkeypatch.setattr(nnsweep.sweep.loop, "Sweep", _Stub)
    monkeypatch.setattr(nnsweep.cli._report_file, "_publish_report", lambda *a, **k: Path("report.html"))
    monkeypatch.setattr(nnsweep.cli.bench, "_execute_bench", lambda *a, **k: 0)


@settings(
    max_examples=SPEC_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=spec_texts())
def test_any_spec_exits_0_or_2_with_one_line_and_writes_nothing_on_2(stubs: None, text: bytes) -> None:
    with _folder() as folder:
        (folder / "spec.yaml").write_bytes(text)
        (folder / "file.py").write_text("def build():\n    pass\n")
        before = {p.name for p in folder.iterdir()}
        code, err = _call(
            ["--cache-dir", str(folder / "cache"), "run", "spec.yaml", "--executor", "local", "--no-tracking"]
        )
        _check(code, err, folder, before)


@settings(
    max_examples=BENCH_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(options=st.lists(_bench_option(), max_size=6), config=CONFIGS, cache_first=st.booleans())
def test_any_bench_arguments_exit_0_or_2_and_write_nothing_on_2(
    stubs: None, options: list[list[str]], config: bytes, cache_first: bool
) -> None:
    with _folder() as folder:
        (folder / "config.yaml").write_bytes(config)
        before = {p.name for p in folder.iterdir()}
        argv = [str(folder / "cache") if arg == "CACHE" else arg for option in options for arg in option]
        args = ["--cache-dir", str(folder / "cache"), "bench", *argv] if cache_first else ["bench", *argv]
        code, err = _call(args)
        _check(code, err, folder, before)
