"""The sweep report: one self-contained HTML file (``nnsweep report SPEC``).

Per device: the accuracy-vs-latency scatter with the Pareto front, the baseline and the
best marked; the best configuration and its partition map; the Pareto configurations'
latency distributions; a sortable table of every trial linked to MLflow. Across devices:
the speed-up chart. plotly.js is inlined once, so the file opens offline. The template,
figures and browser script live in :mod:`nnsweep.dashboards`; plotly is imported only
while a report is written.

Example:
    >>> from nnsweep.report.html import DeviceTrials
    >>> DeviceTrials("host", records=(), baseline=None).device
    'host'
"""

from __future__ import annotations

import datetime as _dt
import html
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from nnsweep.core.atomic import atomic_path
from nnsweep.core.metrics import LATENCY_P50
from nnsweep.core.metrics import row as metric_row
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep.front import best_across_devices, best_choice, best_trial, pareto_front

if TYPE_CHECKING:
    from nnsweep.sensitivity.rank import SensitivityReport
    from nnsweep.spec import SweepSpec
    from nnsweep.tracking import Tracker

__all__ = [
    "DEFAULT_UI_URL",
    "REPORT_ARTIFACT",
    "DeviceTrials",
    "check_ui_url",
    "load_device",
    "publish_report",
    "render_report",
    "write_report",
]

DEFAULT_UI_URL = "http://127.0.0.1:5000"
"""Where ``nnsweep ui`` serves MLflow: the default base of the report's links to runs."""

REPORT_ARTIFACT = "report.html"
"""The report's name among each device run's artifacts."""


def bound_texts(spec: SweepSpec) -> list[str]:
    """Each of the sweep's bounds in words, with the metric's label and unit."""
    c, user = spec.constraints, spec.metrics
    texts = []
    for name, bound in c.max_drop.items():
        m = metric_row(name, user)
        amount = f"{bound * m.scale:g} {'points' if m.unit == '%' else m.unit}".rstrip()
        way = "drop at most {} below" if m.goal == "maximize" else "rise at most {} above"
        texts.append(f"{m.label} may {way.format(amount)} each device's fp32 baseline")
    for word, bounds in (("at least", c.min), ("at most", c.max)):
        for name, bound in bounds.items():
            m = metric_row(name, user)
            texts.append(f"{m.label} {word} {bound * m.scale:g} {m.unit}".rstrip())
    return texts


def check_ui_url(url: str, field: str = "--ui-url") -> str:
    """An ``http(s)://host...`` URL, the only kind the report's links and ``window.open`` may carry.

    Raises:
        SpecError: another scheme (``javascript:``, ``data:``, ``file:``), no host, or
            characters that have no place in a URL.
    """
    from urllib.parse import urlsplit

    from nnsweep.core.errors import SpecError

    shown = repr(url[:60] + ("..." if len(url) > 60 else ""))
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise SpecError(field, f"{shown} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SpecError(field, f"{shown}: give an http:// or https:// URL (e.g. {DEFAULT_UI_URL})")
    if any(ch.isspace() or ord(ch) < 32 or ch in "<>\"'`" for ch in url):
        raise SpecError(field, f"{shown} holds spaces, quotes or control characters")
    return url


@dataclass(frozen=True)
class DeviceTrials:
    """What the report shows of one device.

    Args:
        device: the device's name.
        records: all its trials (measured, reused, failed; interrupted ones are left out of the report).
        baseline: the trial number of its fp32 baseline (``None``: not measured).
        description: one line about the device (arch, CPU, cores), shown beside its name.
    """

    device: str
    records: tuple[TrialRecord, ...]
    baseline: int | None = None
    description: str = ""
    sweep_id: str = ""  # the generation of the sweep its tracker runs belong to ("": already bound)
    profiles: Mapping[int, Mapping[str, object]] = field(default_factory=dict)  # trial -> per-operator profile
    divergences: Mapping[int, Mapping[str, object]] = field(default_factory=dict)  # trial -> layers against fp32

    def baseline_record(self) -> TrialRecord | None:
        """The baseline's record, if it was measured."""
        for r in self.records:
            if r.number == self.baseline and r.status.measured:
                return r
        return None


def load_device(spec: SweepSpec, device: str) -> DeviceTrials:
    """Read a device's trials and its fp32 baseline from the sweep's Optuna study.

    A device whose study does not exist yet (the sweep never ran there) has no records.
    """
    from nnsweep.sweep import studies

    try:
        study = studies.open_study(spec, device, create=False)
    except studies.NoStudy:
        return DeviceTrials(device, ())
    baseline = studies.baseline_number(study)
    records = tuple(studies.study_records(study))
    return DeviceTrials(
        device,
        records,
        baseline,
        sweep_id=studies.sweep_id_of(study) or "",
        profiles=studies.stored_profiles(study),
        divergences=studies.stored_divergences(study),
    )


def render_report(
    spec: SweepSpec,
    devices: Sequence[DeviceTrials],
    *,
    links: Mapping[str, Mapping[int, str]] | None = None,
    ui_url: str = DEFAULT_UI_URL,
    generated: _dt.datetime | None = None,
    sensitivity: Sequence[tuple[str, str, SensitivityReport]] = (),
) -> str:
    """The report as one HTML document (see :func:`write_report`); ``sensitivity``:
    (runtime, granularity, report) of each layer ranking the sweep's float_layers used."""
    from nnsweep import __version__
    from nnsweep.dashboards import sections
    from nnsweep.dashboards.divergence import divergence_section
    from nnsweep.dashboards.operators import operator_section

    links = links or {}
    now = generated or _dt.datetime.now(_dt.UTC)
    plotly_js = _plotly_js()
    page = Template(_asset("report.html"))
    device_tpl = Template(_asset("device.html"))
    objectives = spec.objectives
    blocks, nav, speedups = [], [], []
    total = 0
    for d in devices:
        records = tuple(r for r in d.records if r.status is not TrialStatus.INTERRUPTED)
        total += len(records)
        speedups.append((d.device, records, d.baseline_record()))
        nav.append(f'<a href="#device-{sections.slug(d.device)}">{html.escape(d.device)}</a>')
        blocks.append(_device_block(d, records, spec, links.get(d.device, {}), ui_url, device_tpl))
        if d.profiles:
            best = best_choice(records, objectives).record
            blocks.append(operator_section(d.device, records, best, d.baseline_record(), d.profiles))
        blocks.append(divergence_section(d.device, records, d.divergences))
    emulated = [d.device for d in devices if any(r.emulated for r in d.records)]
    speedup = _speedup_block(speedups, emulated)
    objective_text = ", ".join(f"{o.direction} {o.metric}" for o in objectives)
    constraint = "".join(f"; {limit}" for limit in bound_texts(spec))
    meta = (
        f"model {spec.model} · devices {', '.join(d.device for d in devices)} · {total} trials · "
        f"objectives: {objective_text}{constraint}"
    )
    footer = f"Written by nnsweep {__version__} on {now:%Y-%m-%d %H:%M} UTC from the sweep's Optuna study. " + (
        f"MLflow: {spec.tracking.uri}, experiment {spec.experiment!r}; run links point to {ui_url} "
        f"(start it with `nnsweep ui {shlex.quote(str(spec.source)) if spec.source else 'SPEC'}`)."
        if any(links.values())
        else "No MLflow runs are linked (the sweep ran without tracking, or its store holds none of these trials)."
    )
    return page.substitute(
        version=html.escape(__version__),
        title=html.escape(f"nnsweep report: {spec.name}"),
        meta=html.escape(meta),
        nav=" ".join(['<a href="#overview">overview</a>', *nav]),
        overview=html.escape(
            "Best configuration per device: "
            + "; ".join(_best_line(d, spec) for d in devices)
            + ". Latencies marked 'estimate' come from a compiler's model, not from a measurement."
            + (_EMULATED_NOTE if emulated else "")
        ),
        speedup=speedup,
        shared=sections.shared_choice(
            best_across_devices({d.device: d.records for d in devices}, objectives), [d.device for d in devices]
        ),
        devices="\n".join([*blocks, *(sections.sensitivity_table(rt, g, r) for rt, g, r in sensitivity)]),
        footer=html.escape(footer),
        plotlyjs=plotly_js,
        script=_asset("report.js"),
    )


def _device_block(
    d: DeviceTrials,
    records: tuple[TrialRecord, ...],
    spec: SweepSpec,
    links: Mapping[int, str],
    ui_url: str,
    device_tpl: Template,
) -> str:
    """One device's section: its best card, trade-off plot, partition map, latencies and table."""
    from nnsweep.dashboards import _format, figures, sections

    objectives = spec.objectives
    base = d.baseline_record()
    front = pareto_front(records, objectives)
    choice = best_choice(records, objectives)
    best = choice.record
    urls = {n: u for n, link in links.items() if (u := sections.run_url(ui_url, link))}
    anchor = sections.slug(d.device)
    latency_set = list(front)
    if base is not None and base.number not in {r.number for r in front}:
        latency_set.append(base)
    if any(r.samples_ms for r in latency_set):
        latency = sections.plot_block(
            f"latency-{anchor}",
            "box",
            figures.latency_distributions(latency_set, best=best, baseline=base).to_json(),
            "Per-run latencies of the Pareto configurations (and the fp32 baseline): box = quartiles, "
            "whiskers = 1.5 IQR, dots = outliers.",
        )
    elif any(r.estimated for r in latency_set):
        latency = sections.note("No per-run samples: this device's latencies are compiler estimates.")
    else:
        latency = sections.note("No per-run latency samples were recorded for these configurations.")
    tradeoff = figures.tradeoff(records, objectives, pareto=front, best=best, baseline=base, links=urls)
    if best is not None:
        partitions = sections.plot_block(
            f"partitions-{anchor}",
            "bar",
            figures.partition_map(best).to_json(),
            f"Where the ops of #{best.number} ran: nodes per backend (grey: the runtime's CPU fallback), "
            "each delegated partition, and the operators that fell back.",
        ) + sections.partition_details(best)
    else:
        partitions = sections.note("No best configuration, so no partition map.")
    return device_tpl.substitute(
        anchor=anchor,
        device=html.escape(d.device),
        description=html.escape(d.description),
        counts=html.escape(_counts(records, front)),
        card=sections.best_card(
            d.device, best, base, objectives, link=urls.get(best.number) if best else None, choice=choice
        ),
        tradeoff_title=html.escape(_format.plot_title(objectives)),
        tradeoff=sections.plot_block(
            f"tradeoff-{anchor}",
            "scatter",
            tradeoff.to_json(),
            "Each point is a measured configuration (hover for its settings, click to open its MLflow run). "
            "Grey crosses break the sweep's constraints; hollow markers are compiler estimates. The line is "
            "the feasible Pareto front, the star the fp32 baseline, the green ring the best configuration.",
        ),
        partitions=partitions,
        latency=latency,
        table=sections.trials_table(d.device, records, objectives, pareto=front, best=best, baseline=base, links=urls),
    )


def _speedup_block(speedups: list[tuple[str, tuple[TrialRecord, ...], TrialRecord | None]], emulated: list[str]) -> str:
    """The speed-up chart over every device, with a caption that says what its ratios are."""
    from nnsweep.dashboards import _format as f
    from nnsweep.dashboards import figures, sections

    caption = (
        "For each device and configuration (runtime / backend order / quantization), the fastest feasible trial's "
        "latency p50 relative to that device's fp32 baseline. Hatched: only infeasible trials; dotted: estimate."
    )
    if emulated:
        caption += f" On {', '.join(emulated)} the speed-ups are ratios of latencies timed under emulation."
    for device, _, base in speedups:
        if base is not None and (ranged := f.remeasured(base)) is not None:
            p50 = f.fmt(base.metrics.get(LATENCY_P50), LATENCY_P50)
            caption += f" The fp32 baseline on {device}: p50 {p50}, re-measured {ranged}."
    unbased = [d for d, _, base in speedups if base is None]
    if unbased:
        caption += f" No fp32 baseline was measured on {', '.join(unbased)}, so no speed-up is shown there."
    return sections.plot_block("speedup", "bar", figures.speedup_chart(speedups).to_json(), caption)


def write_report(
    spec: SweepSpec,
    devices: Sequence[DeviceTrials],
    path: Path,
    *,
    links: Mapping[str, Mapping[int, str]] | None = None,
    ui_url: str = DEFAULT_UI_URL,
    sensitivity: Sequence[tuple[str, str, SensitivityReport]] = (),
) -> Path:
    """Write the sweep's report as one self-contained HTML file (plotly.js inlined, no network needed).

    Args:
        spec: the sweep (name, model, objectives, constraint, tracking store).
        devices: what to show of each device, in order (see :func:`load_device`).
        path: the file to write (atomically; parent folders are created).
        links: device -> trial number -> MLflow path ``#/experiments/<id>/runs/<run>``
            (:meth:`nnsweep.tracking.Tracker.trial_links`); trials without one get no link.
        ui_url: the MLflow UI the links point into.

    Returns:
        ``path``.
    """
    check_ui_url(ui_url)
    text = render_report(spec, devices, links=links, ui_url=ui_url, sensitivity=sensitivity)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)  # a report is for reading: mkstemp's 0600 would hide it from a web server or a colleague
    return path


def publish_report(
    spec: SweepSpec,
    path: Path,
    tracker: Tracker | None = None,
    *,
    devices: Sequence[DeviceTrials] | None = None,
    ui_url: str = DEFAULT_UI_URL,
    cache_dir: Path | None = None,
) -> Path:
    """Write the report of ``spec`` and attach it to each device's tracking run.

    What ``nnsweep report SPEC`` does: read every device's trials (:func:`load_device`),
    link each trial to its run (:meth:`~nnsweep.tracking.Tracker.trial_links`), write
    ``path`` and log it as ``report.html`` on each device's run. Devices the tracker
    has no run for get no links and no artifact; nothing new is created in the tracker.

    Args:
        spec: the sweep.
        path: where to write the HTML file.
        tracker: the sweep's tracker (``None``: no links, nothing logged).
        devices: what to show (default: every device of ``spec``, read from its study).
        ui_url: the MLflow UI the links point into.
        cache_dir: the artifact cache, where the layer rankings the sweep used are kept.
    """
    if devices is None:
        devices = [load_device(spec, name) for name in spec.devices]
    # Only devices the tracker knows get links and the artifact: a report never creates runs.
    bound = next((d.sweep_id for d in devices if d.sweep_id), "")
    if tracker is not None and bound:
        tracker.bind(bound)
    tracked = [d for d in devices if tracker is not None and d.records and tracker.attach_device(d.device)]
    links = {d.device: tracker.trial_links(d.device) for d in tracked} if tracker is not None else {}
    rankings = _rankings(spec, cache_dir) if cache_dir is not None else []
    write_report(spec, devices, path, links=links, ui_url=ui_url, sensitivity=rankings)
    if tracker is not None:
        for d in tracked:
            tracker.log_device_artifact(d.device, REPORT_ARTIFACT, path)
    return path


def _rankings(spec: SweepSpec, cache_dir: Path) -> list[tuple[str, str, SensitivityReport]]:
    """The layer rankings a sweep with ``space.float_layers`` used, read from the cache."""
    if spec.space.float_layers == (0,):
        return []
    from nnsweep.sensitivity.ranking import cached_ranking, ranked_runtimes
    from nnsweep.sweep import studies
    from nnsweep.sweep.rankings import ranking_metric

    digest = None
    for device in spec.devices:
        try:
            digest = (studies.fingerprint_of(studies.open_study(spec, device, create=False)) or {}).get("model_digest")
        except studies.NoStudy:
            continue
        if digest:
            break
    if not digest:
        return []
    found = []
    ranked = ranked_runtimes()
    by = ranking_metric(spec)
    metric = next((m for m in spec.metrics if m.name == by), None)
    splits = ("calibration", "evaluation") if metric is not None else ("calibration",)
    for runtime in spec.space.runtimes:
        for granularity in spec.space.granularity:
            if runtime not in ranked:
                continue
            reports = (cached_ranking(digest, runtime, granularity, cache_dir, metric, split) for split in splits)
            if report := next((r for r in reports if r is not None), None):
                found.append((runtime, granularity.value, report))
    return found


def _asset(name: str) -> str:
    return resources.files("nnsweep.dashboards").joinpath(name).read_text(encoding="utf-8")


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


_EMULATED_NOTE = (
    " Latencies marked 'emulated' were timed on an emulated board (qemu-user on another CPU): not a real "
    "board's latency; accuracy and fidelity measured there are the board's own kernels'."
)


def _counts(records: Sequence[TrialRecord], front: Sequence[TrialRecord]) -> str:
    by = {s: sum(1 for r in records if r.status is s) for s in TrialStatus}
    infeasible = sum(1 for r in records if r.feasible is False)
    estimated = sum(1 for r in records if r.estimated and r.status.measured)
    emulated = sum(1 for r in records if r.emulated and r.status.measured)
    floats = sum(1 for r in records if r.float_in_effect and r.status.measured)
    text = (
        f"{len(records)} trials: {by[TrialStatus.OK]} measured, {by[TrialStatus.REUSED]} reused an earlier "
        f"measurement, {by[TrialStatus.FAILED]} failed; {infeasible} infeasible; {len(front)} on the Pareto front"
    )
    if estimated:
        text += f"; {estimated} with compiler-estimated latency"
    if emulated:
        text += f"; {emulated} with latency timed under emulation (qemu-user)"
    if floats:
        text += f"; {floats} int8 float in effect (outputs within float32's rounding of fp32's)"
    return text + "."


def _best_line(d: DeviceTrials, spec: SweepSpec) -> str:
    best = best_trial(d.records, spec.objectives)
    if best is None:
        return f"{d.device}: none yet"
    note = " (latency estimated)" if best.estimated else " (latency emulated)" if best.emulated else ""
    note += " (float in effect)" if best.float_in_effect else ""
    return f"{d.device}: #{best.number} {best.config.label()}{note}"
