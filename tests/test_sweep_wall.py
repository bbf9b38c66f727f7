"""The wall-time benchmark's reading of the cache (benchmarks/sweep_wall.py): the seconds
during which any worker was building, from each artifact's ``meta.json``. No sweep runs."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def sweep_wall():
    spec = importlib.util.spec_from_file_location("sweep_wall", BENCHMARKS / "sweep_wall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sweep_wall"] = module
    spec.loader.exec_module(module)
    return module


def _artifact(cache: Path, name: str, convert_s: object, ended: float) -> None:
    meta = cache / "artifacts" / name[:2] / name / "meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"convert_s": convert_s}))
    os.utime(meta, (ended, ended))


def test_overlapping_builds_count_once_and_apart_ones_add(tmp_path: Path, sweep_wall) -> None:
    _artifact(tmp_path, "aa1", 10.0, 1_000.0)  # 990-1000
    _artifact(tmp_path, "bb1", 4.0, 998.0)  # 994-998: inside the first
    _artifact(tmp_path, "cc1", 6.0, 1_004.0)  # 998-1004: overlaps the first's end
    _artifact(tmp_path, "dd1", 3.0, 1_010.0)  # 1007-1010: apart
    covered, summed = sweep_wall._building_wall(sweep_wall._metas(tmp_path))
    assert summed == pytest.approx(23.0)
    assert covered == pytest.approx(14.0 + 3.0)


def test_one_at_a_time_the_two_figures_agree_and_bad_entries_are_skipped(tmp_path: Path, sweep_wall) -> None:
    _artifact(tmp_path, "aa1", 5.0, 100.0)
    _artifact(tmp_path, "bb1", 7.0, 107.0)
    _artifact(tmp_path, "cc1", "not a number", 200.0)
    (tmp_path / "artifacts" / "dd" / "dd1").mkdir(parents=True)
    (tmp_path / "artifacts" / "dd" / "dd1" / "meta.json").write_text("{torn")
    covered, summed = sweep_wall._building_wall(sweep_wall._metas(tmp_path))
    assert covered == pytest.approx(summed) == pytest.approx(12.0)


def test_the_time_line_s_seconds_are_read_by_name(sweep_wall) -> None:
    line = (
        "Time: starting its runtimes 3.0 s, waiting to convert 213.8 s, converting 121.7 s, "
        "waiting for the device 298.4 s, measuring 23.2 s; timed runs 19.4 s = 83.45% of the time measuring"
    )
    assert sweep_wall.time_line_seconds(line, "converting") == 121.7
    assert sweep_wall.time_line_seconds(line, "waiting to convert") == 213.8
    assert sweep_wall.time_line_seconds(line, "measuring") == 23.2
    assert sweep_wall.time_line_seconds("Time: (not printed)", "converting") is None
