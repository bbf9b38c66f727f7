"""The progress display: its pace arithmetic on a fake clock, plain lines for logs, rich bars for terminals."""

from __future__ import annotations

import doctest
import io
import logging
import re
import subprocess
import sys
from dataclasses import dataclass, replace

import pytest

from nnsweep.report import progress as _progress
from nnsweep.report.progress import Pace, ProgressDisplay, format_duration


@dataclass(frozen=True)
class Snap:
    """Has the attributes of nnsweep.sweep.loop.DeviceProgress (the display takes any such object)."""

    device: str
    done: int
    budget: int
    failed: int = 0
    reused: int = 0
    activity: str = "idle"
    best: str | None = None
    lost: bool = False


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_docstring_examples() -> None:
    result = doctest.testmod(_progress)
    assert result.attempted > 0 and result.failed == 0


def test_pace_counts_only_trials_finished_in_this_run() -> None:
    pace = Pace.first(done=5, now=0.0)  # 5 trials restored from an earlier run
    assert pace.seconds_per_trial is None and pace.eta(budget=10, now=3.0) is None
    pace.advance(6, now=20.0)
    pace.advance(7, now=30.0)
    assert pace.seconds_per_trial == 15.0
    assert pace.eta(budget=10, now=30.0) == 45.0
    assert pace.eta(budget=10, now=40.0) == 35.0  # counts down between snapshots
    assert pace.eta(budget=10, now=500.0) == 0.0  # never negative
    pace.advance(3, now=50.0)  # a smaller count is not taken
    assert pace.done == 7
    pace.advance(10, now=60.0)
    assert pace.eta(budget=10, now=60.0) == 0.0


def test_durations_read_like_a_person_writes_them() -> None:
    assert [format_duration(s) for s in (0.04, 59.94, 60, 3599, 3600, 86399)] == [
        "0.0 s",
        "59.9 s",
        "1m00s",
        "59m59s",
        "1h00m",
        "23h59m",
    ]


def test_plain_lines_only_when_counts_change() -> None:
    out, clock = io.StringIO(), FakeClock()
    display = ProgressDisplay(stream=out, terminal=False, clock=clock)
    host, board = Snap("host", 0, 4), Snap("rpi5", 0, 4)
    display.update([host, board])
    clock.now += 1
    display.update([replace(host, activity="converting"), replace(board, activity="measuring x")])  # no line
    clock.now += 9
    display.update([replace(host, done=1, best="#0 onnxruntime/cpu/fp32/t1 (accuracy 0.98)"), board])
    clock.now += 10
    display.update([replace(host, done=2, failed=1, activity="measuring y"), replace(board, lost=True)])
    display.close()
    assert out.getvalue().splitlines() == [
        "host: 0/4 trials (0 failed, 0 reused) · idle",
        "rpi5: 0/4 trials (0 failed, 0 reused) · idle",
        "host: 1/4 trials (0 failed, 0 reused) · 10.0 s/trial · ETA 30.0 s · idle",
        "    best so far: #0 onnxruntime/cpu/fp32/t1 (accuracy 0.98)",
        "host: 2/4 trials (1 failed, 0 reused) · 10.0 s/trial · ETA 20.0 s · measuring y",
        "rpi5: 0/4 trials (0 failed, 0 reused) · LOST (waiting for it to rejoin)",
    ]


def test_disabled_display_writes_nothing() -> None:
    out = io.StringIO()
    display = ProgressDisplay(enabled=False, stream=out, terminal=True)
    display.update([Snap("host", 1, 4)])
    display.note("ranking the layers of m through onnxruntime's quantizer (once per model) ...")
    display.close()
    assert out.getvalue() == ""


@pytest.mark.parametrize("terminal", [False, True])
def test_a_note_is_a_line_of_its_own_before_and_during_the_bars(terminal: bool) -> None:
    out = io.StringIO()
    display = ProgressDisplay(stream=out, terminal=terminal, clock=lambda: 0.0, width=120)
    display.note("ranking the layers of m through executorch's quantizer (once per model) ...")
    display.update([Snap("host", 0, 4)])
    display.note("executorch: 12/55 quantize-and-evaluate runs [as written]")
    display.close()
    text = out.getvalue()
    assert text.startswith("ranking the layers of m through executorch's quantizer (once per model) ...\n")
    assert "executorch: 12/55 quantize-and-evaluate runs [as written]\n" in text  # above the bars, not in them


def test_not_a_terminal_means_plain_lines() -> None:
    out = io.StringIO()  # StringIO.isatty() is False, as a CI log's pipe is
    display = ProgressDisplay(stream=out)
    display.update([Snap("host", 0, 4)])
    display.close()
    assert not display.terminal and "\x1b[" not in out.getvalue()


def test_terminal_shows_bars_pace_eta_activity_and_best() -> None:
    out, clock = io.StringIO(), FakeClock()
    display = ProgressDisplay(stream=out, terminal=True, clock=clock, width=160)
    display.update([Snap("host", 0, 8, activity="converting"), Snap("u55", 0, 8, activity="waiting")])
    clock.now += 12
    display.update(
        [
            Snap("host", 2, 8, reused=1, activity="measuring executorch/xnnpack/fp32/t1", best="#1 x (accuracy 0.97)"),
            Snap("u55", 1, 8, activity="[estimate] vela", lost=True),
        ]
    )
    display.close()
    display.close()  # idempotent (cli closes in a finally after an interrupt's close)
    text = out.getvalue()
    assert "\x1b[" in text  # drawn in place with the terminal's control codes
    last = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # rich repaints whole frames; the last holds all of these
    assert "━" in last  # rich's bar
    assert "2/8 · 0 failed · 1 reused" in last
    assert "6.0 s/trial · ETA 36.0 s" in last
    assert "12.0 s/trial · ETA 1m24s" in last
    assert "measuring executorch/xnnpack/fp32/t1" in last
    assert "best on host: #1 x (accuracy 0.97)" in last
    assert "LOST" in last
    final = last[last.rindex("host ━") :]  # the frame close() leaves: no ETA once nothing is pending
    assert "6.0 s/trial" in final and "ETA" not in final


def test_markup_in_activity_text_is_shown_as_written() -> None:
    out = io.StringIO()
    display = ProgressDisplay(stream=out, terminal=True, width=160)
    display.update([Snap("host", 0, 2, activity="measuring [bold]odd[/bold] name")])
    display.close()
    assert "[bold]odd[/bold]" in out.getvalue()


def test_log_lines_during_the_display_go_through_it_and_handlers_get_their_stream_back() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logger = logging.getLogger("nnsweep.test_progress")
    logger.addHandler(handler)
    try:
        display = ProgressDisplay(stream=out, terminal=True, width=120)
        display.update([Snap("host", 0, 2)])
        logger.warning("a warning while the bars are drawn")
        rerouted = handler.stream is not out  # printed above the bars by rich, not across them
        display.close()
    finally:
        logger.removeHandler(handler)
    assert rerouted and handler.stream is out
    assert "a warning while the bars are drawn" in out.getvalue()


@pytest.mark.parametrize("module", ["nnsweep.report.progress"])
def test_importing_it_does_not_import_rich(module: str) -> None:
    code = f"import sys, {module}; print('rich' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
