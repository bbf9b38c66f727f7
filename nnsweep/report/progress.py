"""Per-device progress of a sweep, for people: bars on a terminal, plain lines in a log.

On a terminal a ``rich`` live display shows one row per device (trials done of the
budget, failed and reused counts, time per trial, ETA, current activity, best so far);
otherwise one plain line per device each time its counts change, so a log stays short.
Snapshots come from the coordinator (``Sweep(progress=display.update)``): objects with
the attributes of ``nnsweep.sweep.loop.DeviceProgress``. The pace is measured here from
the wall clock, over the trials finished since the device was first seen (restored ones
do not count); until the first, the ETA shows ``–``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

__all__ = ["DeviceSnapshot", "Pace", "ProgressDisplay", "format_duration"]


class DeviceSnapshot(Protocol):
    """What the display reads from one device's snapshot (``nnsweep.sweep.loop.DeviceProgress`` has it)."""

    @property
    def device(self) -> str: ...
    @property
    def done(self) -> int: ...
    @property
    def budget(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def reused(self) -> int: ...
    @property
    def activity(self) -> str: ...
    @property
    def best(self) -> str | None: ...
    @property
    def lost(self) -> bool: ...


@dataclass
class Pace:
    """The pace of one device, from the snapshots seen so far.

    Args:
        started_at: clock time the device was first seen.
        done_at_start: trials already done then (restored from an earlier run).
        done: trials done now.
        last_change_at: clock time ``done`` last grew.
    """

    started_at: float
    done_at_start: int
    done: int
    last_change_at: float

    @classmethod
    def first(cls, done: int, now: float) -> Pace:
        return cls(started_at=now, done_at_start=done, done=done, last_change_at=now)

    def advance(self, done: int, now: float) -> None:
        """Take a new snapshot's count (a count never goes back: a smaller one is ignored)."""
        if done > self.done:
            self.done = done
            self.last_change_at = now

    @property
    def seconds_per_trial(self) -> float | None:
        """Wall time per trial finished in this run, or ``None`` before the first one."""
        finished = self.done - self.done_at_start
        if finished <= 0:
            return None
        return (self.last_change_at - self.started_at) / finished

    def eta(self, budget: int, now: float) -> float | None:
        """Seconds until the budget is done: the trials left at the pace so far, less the time
        already spent on the current one (never below zero); ``None`` while the pace is unknown."""
        per_trial = self.seconds_per_trial
        if per_trial is None:
            return None
        left = max(budget - self.done, 0)
        if left == 0:
            return 0.0
        return max(left * per_trial - (now - self.last_change_at), 0.0)


def format_duration(seconds: float | None) -> str:
    """``42.0 s`` below a minute, ``4m05s`` below an hour, ``2h03m`` above; ``–`` when unknown.

    Example:
        >>> format_duration(3.21), format_duration(245), format_duration(7390), format_duration(None)
        ('3.2 s', '4m05s', '2h03m', '–')
    """
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _counts(d: DeviceSnapshot) -> str:
    return f"{d.done}/{d.budget} trials ({d.failed} failed, {d.reused} reused)" + _space(d)


def _space(d: DeviceSnapshot) -> str:
    """The device's space, its size or that it is exhausted (snapshots that do not say: nothing)."""
    space = getattr(d, "space", "")
    return f" · space {space}" if space else ""


class ProgressDisplay:
    """Per-device progress: ``rich`` bars on a terminal, plain lines otherwise.

    Call :meth:`update` with every snapshot (a list with one entry per device) and
    :meth:`close` once at the end (also after an interrupt): it stops the live display
    and leaves the last state on screen.

    Args:
        enabled: ``False`` shows nothing (``nnsweep run --json``).
        stream: where to write (default ``sys.stderr``).
        terminal: draw bars (``True``) or write plain lines (``False``); default: whether
            ``stream`` is a terminal.
        clock: seconds, monotonic (tests pass a fake one).
        width: the terminal's width in columns when ``terminal`` is forced (default: detected).
    """

    def __init__(
        self,
        enabled: bool = True,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        width: int | None = None,
    ) -> None:
        self.enabled = enabled
        self._stream = stream if stream is not None else sys.stderr
        self.terminal = self._stream.isatty() if terminal is None else terminal
        self._clock = clock
        self._width = width
        self._paces: dict[str, Pace] = {}
        self._printed: dict[str, tuple[int, int, int, bool]] = {}
        self._progress: Any = None  # rich.progress.Progress, created on the first update
        self._tasks: dict[str, Any] = {}
        self._rerouted: list[tuple[logging.StreamHandler[Any], Any]] = []
        self._closed = False

    # ------------------------------------------------------------------ public
    def update(self, devices: Sequence[DeviceSnapshot]) -> None:
        """Show a new snapshot of every device.

        Example:
            >>> import io
            >>> from types import SimpleNamespace
            >>> out = io.StringIO()
            >>> display = ProgressDisplay(stream=out, terminal=False, clock=iter([0.0, 30.0]).__next__)
            >>> snap = dict(device="host", budget=4, failed=0, reused=0, activity="converting", best=None, lost=False)
            >>> display.update([SimpleNamespace(done=0, **snap)])
            >>> display.update([SimpleNamespace(done=1, **snap)])
            >>> display.close()
            >>> print(out.getvalue().rstrip())
            host: 0/4 trials (0 failed, 0 reused) · converting
            host: 1/4 trials (0 failed, 0 reused) · 30.0 s/trial · ETA 1m30s · converting
        """
        if not self.enabled:
            return
        now = self._clock()
        for d in devices:
            pace = self._paces.get(d.device)
            if pace is None:
                self._paces[d.device] = Pace.first(d.done, now)
            else:
                pace.advance(d.done, now)
        if self.terminal:
            self._draw(devices, now)
        else:
            self._write_lines(devices, now)

    def note(self, text: str) -> None:
        """Show one line about a long step outside the trials (a runtime's layer ranking):
        above the bars on a terminal, as a plain line otherwise."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False)
            return
        self._stream.write(text + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Stop the live display, leaving its last frame (time per trial, no ETA: nothing is
        pending once the sweep has ended or was interrupted); idempotent."""
        if self._progress is not None:
            self._closed = True
            self._progress.stop()
            self._stop()
            self._progress = None
            self._tasks = {}

    # ------------------------------------------------------------ plain lines
    def _write_lines(self, devices: Sequence[DeviceSnapshot], now: float) -> None:
        for d in devices:
            key = (d.done, d.failed, d.reused, d.lost)
            if self._printed.get(d.device) == key:
                continue
            self._printed[d.device] = key
            pace = self._paces[d.device]
            parts = [f"{d.device}: {_counts(d)}"]
            if pace.seconds_per_trial is not None:
                parts.append(f"{format_duration(pace.seconds_per_trial)}/trial")
                parts.append(f"ETA {format_duration(pace.eta(d.budget, now))}")
            parts.append("LOST (waiting for it to rejoin)" if d.lost else d.activity)
            line = " · ".join(parts)
            if d.best:
                line += f"\n    best so far: {d.best}"
            self._stream.write(line + "\n")
        self._stream.flush()

    # ---------------------------------------------------------------- terminal
    def _start(self) -> Any:
        from rich.console import Console

        console = Console(file=self._stream, force_terminal=True, width=self._width, highlight=False)
        progress = _bars(console, self)
        progress.start()
        # rich now routes sys.stderr above the bars; log handlers hold the stream they were
        # given, so point those writing to our stream at the same route until close().
        self._rerouted = []
        for handler in _stream_handlers():
            if handler.stream is self._stream and sys.stderr is not self._stream:
                self._rerouted.append((handler, handler.setStream(sys.stderr)))
        return progress

    def _stop(self) -> None:
        for handler, stream in self._rerouted:
            handler.setStream(stream)
        self._rerouted = []

    def _draw(self, devices: Sequence[DeviceSnapshot], now: float) -> None:
        if self._progress is None:
            self._progress = self._start()
        for d in devices:
            fields = {
                "device": d.device,
                "counts": f"{d.done}/{d.budget} · {d.failed} failed · {d.reused} reused" + _space(d),
                "activity": "LOST (waiting for it to rejoin)" if d.lost else d.activity,
                "lost": d.lost,
                "best": d.best,
            }
            task = self._tasks.get(d.device)
            if task is None:
                self._tasks[d.device] = self._progress.add_task(d.device, total=d.budget, completed=d.done, **fields)
            else:
                self._progress.update(task, total=d.budget, completed=d.done, **fields)
        self._progress.refresh()

    def pace_text(self, device: str, budget: int) -> str:
        """``12.3 s/trial · ETA 4m05s`` for a device (what the terminal's pace column shows)."""
        pace = self._paces.get(device)
        if pace is None:
            return ""
        per_trial = format_duration(pace.seconds_per_trial)
        if self._closed:
            return f"{per_trial}/trial"
        return f"{per_trial}/trial · ETA {format_duration(pace.eta(budget, self._clock()))}"


def _stream_handlers() -> list[logging.StreamHandler[Any]]:
    """Every logging handler that writes to a stream (root's and each named logger's)."""
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers if type(h) is logging.StreamHandler]


def _bars(console: Any, display: ProgressDisplay) -> Any:
    """rich's Progress with our columns: one row per device, then each device's best trial on a line
    of its own (a long configuration label would squeeze the bars); rich is imported only here."""
    from rich.progress import BarColumn, Progress, ProgressColumn
    from rich.table import Column
    from rich.text import Text

    class Cell(ProgressColumn):
        def __init__(self, render: Any, overflow: str = "fold") -> None:
            super().__init__(table_column=Column(no_wrap=True, overflow=overflow))  # type: ignore[arg-type]
            self._render = render

        def render(self, task: Any) -> Text:
            return self._render(task)  # type: ignore[no-any-return]

    class Bars(Progress):
        def get_renderables(self) -> Any:
            yield self.make_tasks_table(self.tasks)
            for task in self.tasks:
                if task.fields.get("best"):
                    line = Text.assemble(
                        ("best on ", "dim"), (task.fields["device"], "bold"), ": ", task.fields["best"]
                    )
                    line.no_wrap, line.overflow = True, "ellipsis"
                    yield line

    def pace(task: Any) -> Text:
        return Text(display.pace_text(task.fields["device"], int(task.total or 0)), style="cyan")

    return Bars(
        Cell(lambda t: Text(t.fields["device"], style="bold")),
        BarColumn(bar_width=24),
        Cell(lambda t: Text(t.fields["counts"])),
        Cell(pace),
        Cell(lambda t: Text(t.fields["activity"], style="red" if t.fields["lost"] else ""), overflow="ellipsis"),
        console=console,
        refresh_per_second=4,
        expand=False,
    )
