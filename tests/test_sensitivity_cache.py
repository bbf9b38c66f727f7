"""The ranking's cache entry: read back as measured, and measured again when it is damaged,
altered, or ranks layers the model does not have (real ONNX Runtime quantizer, digits)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from nnsweep.core.quant import Granularity
from nnsweep.sensitivity.ranking import cached_ranking, ranking, report_to_dict


def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    """Reports equal as written (a layer not measured one way holds ``nan``, never equal to itself)."""
    return a is not None and json.dumps(report_to_dict(a)) == json.dumps(report_to_dict(b))


def _entry(cache: Path) -> Path:
    (path,) = (cache / "sensitivity").glob("*/*.json")
    return path


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory, digits):  # type: ignore[no-untyped-def]
    cache = tmp_path_factory.mktemp("ranked") / "cache"
    report, hit = ranking(digits, "onnxruntime", None, cache)
    assert not hit
    return cache, report


@pytest.fixture
def ranked(tmp_path: Path, measured):  # type: ignore[no-untyped-def]
    """A cache of its own holding the measured entry (each test changes it)."""
    import shutil

    source, report = measured
    return shutil.copytree(source, tmp_path / "cache"), report


def test_an_entry_reads_back_as_measured(ranked, digits) -> None:  # type: ignore[no-untyped-def]
    cache, report = ranked
    assert _same(cached_ranking(digits.digest, "onnxruntime", Granularity.PER_TENSOR, cache), report)
    again, hit = ranking(digits, "onnxruntime", None, cache)
    assert hit and _same(again, report)


def _rewrite(path: Path, change: str) -> None:
    entry = json.loads(path.read_text())
    data = entry["report"]
    if change == "accuracy":  # one number changed, still valid JSON
        data["layers"][0][2] = 0.01
    elif change == "renamed":
        data["layers"][0][0] = "not.a.layer"
    elif change == "unsealed":  # an entry written before entries carried their sha256
        entry = data
    elif change == "truncated":
        path.write_text(path.read_text()[:50])
        return
    path.write_text(json.dumps(entry))


@pytest.mark.parametrize("change", ["accuracy", "renamed", "unsealed", "truncated"])
def test_a_changed_entry_is_measured_again(ranked, digits, change: str, caplog) -> None:  # type: ignore[no-untyped-def]
    cache, report = ranked
    path = _entry(cache)
    _rewrite(path, change)
    assert cached_ranking(digits.digest, "onnxruntime", Granularity.PER_TENSOR, cache) is None
    with caplog.at_level(logging.INFO, logger="nnsweep.sensitivity.ranking"):
        again, hit = ranking(digits, "onnxruntime", None, cache)
    assert not hit and "measuring again" in caplog.text
    said = "written by an older nnsweep" if change == "unsealed" else "is damaged"
    assert said in caplog.text
    assert [e.layer for e in again.layers] == [e.layer for e in report.layers]
    assert _same(cached_ranking(digits.digest, "onnxruntime", Granularity.PER_TENSOR, cache), again)  # kept again


def test_an_intact_entry_that_ranks_other_layers_is_measured_again(ranked, digits, caplog) -> None:  # type: ignore[no-untyped-def]
    """Sealed, but not this model's layers (written by hand, or by a bug): the names are
    what float_layers keeps, so they are checked against the model's candidates."""
    import dataclasses

    from nnsweep.sensitivity import ranking as module

    cache, report = ranked
    path = _entry(cache)
    foreign = dataclasses.replace(report, layers=(dataclasses.replace(report.layers[0], layer="not.a.layer"),))
    path.write_text(module._sealed(foreign))
    assert _same(cached_ranking(digits.digest, "onnxruntime", Granularity.PER_TENSOR, cache), foreign)
    with caplog.at_level(logging.WARNING, logger="nnsweep.sensitivity.ranking"):
        again, hit = ranking(digits, "onnxruntime", None, cache)
    assert not hit and "layers this model does not have" in caplog.text
    assert sorted(e.layer for e in again.layers) == sorted(e.layer for e in report.layers)
