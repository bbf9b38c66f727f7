"""The HTML report, built from hand-made trials (``nnsweep.dashboards.sample``) and read back as HTML.

What a browser shows is checked in ``test_browser.py``; here the file's content and structure.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.dashboards import figures
from nnsweep.dashboards.sample import sample_devices, sample_links, sample_spec
from nnsweep.report.html import (
    REPORT_ARTIFACT,
    DeviceTrials,
    load_device,
    publish_report,
    render_report,
    write_report,
)

BEST = {
    "host": "#1 executorch/xnnpack>portable/fp32/t1",
    "rpi5": "#2 executorch/xnnpack>portable/static_int8(per_channel)/t1",
    "npu-sim": "#0 executorch/xnnpack>portable/static_int8(per_tensor)/t1",
}


class _Page(HTMLParser):
    """Tags with their attributes, the text outside scripts and styles, and each script's content."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in: tuple[str, dict[str, str | None]] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self._in, self._buf = (tag, dict(attrs)), []

    def handle_endtag(self, tag: str) -> None:
        if self._in is not None and tag == self._in[0]:
            if tag == "script":
                self.scripts.append((self._in[1], "".join(self._buf)))
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self._buf.append(data)
        else:
            self.text.append(data)

    @property
    def visible(self) -> str:
        return re.sub(r"\s+", " ", "".join(self.text))

    def figure(self, plot_id: str) -> dict[str, Any]:
        for attrs, body in self.scripts:
            if attrs.get("data-target") == plot_id:
                return dict(json.loads(body))
        raise KeyError(plot_id)


@pytest.fixture(scope="module")
def page_html() -> str:
    return render_report(sample_spec(), sample_devices(), links=sample_links())


@pytest.fixture(scope="module")
def page(page_html: str) -> _Page:
    parsed = _Page()
    parsed.feed(page_html)
    return parsed


def test_the_report_is_one_self_contained_file(page: _Page) -> None:
    # Nothing the browser would fetch: no stylesheet links, no script/img/iframe sources, no CSS url().
    assert not [a for t, a in page.tags if t == "link"]
    for tag, attrs in page.tags:
        if tag in ("script", "img", "iframe", "source", "embed", "object"):
            assert not (attrs.get("src") or attrs.get("data")), (tag, attrs)
    # plotly.js is inlined exactly once, in the head, before the plots that need it.
    bundles = [body for attrs, body in page.scripts if "plotly.js v" in body[:200]]
    assert len(bundles) == 1 and len(bundles[0]) > 1_000_000
    # The only absolute links are to MLflow runs, and they are links a person clicks, not loads.
    hrefs = [a.get("href") or "" for t, a in page.tags if t == "a"]
    external = [h for h in hrefs if re.match(r"https?://", h)]
    assert external and all(h.startswith("http://127.0.0.1:5000/#/experiments/1/runs/") for h in external)


def test_style_has_no_remote_urls(page_html: str) -> None:
    style = page_html.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "@import" not in style


def test_every_device_has_its_name_best_card_plots_and_table(page: _Page) -> None:
    text = page.visible
    for device, label in BEST.items():
        assert f"Best on {device}: {label}" in text
    ids = {a.get("id") for t, a in page.tags if t == "div" and "plot" in (a.get("class") or "").split()}
    assert ids == {
        "speedup",
        *(f"{kind}-{d}" for kind in ("tradeoff", "partitions") for d in ("host", "rpi5", "npu-sim")),
        "latency-host",
        "latency-rpi5",
    }
    # The estimate-only device has no per-run samples: a sentence instead of an empty plot.
    assert "No per-run samples: this device's latencies are compiler estimates." in text
    tables = [a.get("data-device") for t, a in page.tags if t == "table"]
    assert tables == ["host", "rpi5", "npu-sim"]


def test_best_card_lists_what_to_deploy(page_html: str) -> None:
    card = page_html.split('class="card best-card" data-device="rpi5"', 1)[1].split("</div>", 1)[0]
    text = re.sub(r"<[^>]+>", "", card)
    for expected in (
        "runtimeexecutorch",
        "backend orderxnnpack &gt; portable",
        "quantizationstatic_int8 · per_channel · minmax calibration, 8 batches · float in/out (core)",
        "partition limitsany number of partitions · at least 1 node each",
        "latency p50 / p900.1510 ms / 0.1691 ms",
        "accuracy97.41 %",
        "speed-up vs fp3212.65×",
        "fp32 baseline#0 torch/-/fp32/t1",
    ):
        assert expected in text, expected
    assert 'href="http://127.0.0.1:5000/#/experiments/1/runs/rpi5-0002"' in card


def test_tradeoff_plot_marks_front_baseline_best_and_infeasible(page: _Page) -> None:
    fig = page.figure("tradeoff-host")
    names = [t["name"] for t in fig["data"]]
    assert names == [
        "feasible (5)",
        "infeasible (1)",
        "Pareto front (2)",
        "re-measured interval of the median",
        "fp32 baseline: #0 torch/-/fp32/t1",
        "best: #1 executorch/xnnpack>portable/fp32/t1",
    ]
    front = fig["data"][2]
    ranged = fig["data"][3]  # the best was re-measured: its interval of the median as an error bar
    assert ranged["error_x"]["arrayminus"][0] == pytest.approx(0.0297 - 0.0290)
    assert front["line"]["shape"] == "hv" and front["x"] == sorted(front["x"])
    infeasible = fig["data"][1]
    assert infeasible["marker"]["symbol"] == "x" and "qnnpack" in infeasible["text"][0]
    # The QNNPACK outlier (12.5 %) would squash the plot: the range stays on the feasible trials, and says so.
    assert fig["layout"]["yaxis"]["range"][0] > 90
    assert "1 infeasible trial outside this range" in fig["layout"]["annotations"][0]["text"]
    hovers = " ".join(fig["data"][0]["text"])
    assert "runtime: onnxruntime · backends: cpu · threads: 1" in hovers
    assert "also measured as: #6 (reused)" in hovers  # the reused trial is not drawn twice
    assert all("#7 " not in h for t in fig["data"] for h in t.get("text", []))  # failed: table only
    links = fig["data"][0]["customdata"]
    assert all(u.startswith("http://127.0.0.1:5000/#/experiments/1/runs/host-") for u in links)


def test_estimated_latencies_are_labelled_everywhere(page: _Page, page_html: str) -> None:
    fig = page.figure("tradeoff-npu-sim")
    estimated = fig["data"][0]
    assert estimated["name"] == "feasible, latency estimated (2)" and estimated["marker"]["symbol"] == "circle-open"
    assert all("latency p50: " in h and "(estimate)" in h for h in estimated["text"])
    assert "compiler estimate" in fig["layout"]["xaxis"]["title"]["text"]
    card = page_html.split('data-device="npu-sim"><h3>', 1)[1].split("</div>", 1)[0]
    assert 'class="badge estimate"' in card
    table = page_html.split('<table class="trials sortable" data-device="npu-sim">', 1)[1].split("</table>", 1)[0]
    rows = table.split("<tr ")[1:]  # the header row is a bare <tr>
    assert len(rows) == 2 and all(row.count("estimate</span>") == 2 for row in rows)  # p50 and p90


def test_table_lists_every_trial_with_status_reason_and_link(page_html: str) -> None:
    table = page_html.split('<table class="trials sortable" data-device="host">', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r'<tr class="([^"]*)" data-trial="(\d+)">', table)
    assert [int(n) for _, n in rows] == list(range(8))  # the interrupted trial #8 is left out
    classes = dict((int(n), c.split()) for c, n in rows)
    assert "best" in classes[1] and "pareto" in classes[1] and "baseline" in classes[0]
    assert "infeasible" in classes[4] and "status-failed" in classes[7]
    assert "failed: BenchmarkError: the benchmark process exceeded its 600 s timeout" in table
    assert "reused #2" in table
    assert table.count('href="http://127.0.0.1:5000/#/experiments/1/runs/host-') == 8
    headers = re.findall(r'<th scope="col" data-type="(\w+)"><button type="button">([^<]*)</button>', table)
    assert headers[:6] == [
        ("number", "#"),
        ("text", "configuration"),
        ("text", "status"),
        ("text", "feasible"),
        ("number", "accuracy (%)"),
        ("number", "latency p50 (ms)"),
    ]


def test_links_follow_the_tracking_ui_base_url() -> None:
    html = render_report(sample_spec(), sample_devices()[:1], links=sample_links(), ui_url="http://mlflow.lab:8080/")
    assert 'href="http://mlflow.lab:8080/#/experiments/1/runs/host-0001"' in html
    assert "127.0.0.1:5000" not in html.split("<footer>", 1)[0].split("</head>", 1)[1]
    without = render_report(sample_spec(), sample_devices()[:1])
    assert ">run</a>" not in without
    # a sweep run without tracking names no MLflow store in its footer, as `run` prints none
    assert "No MLflow runs are linked" in without and "MLflow: sqlite" not in without.split("<footer>", 1)[1]
    assert "MLflow: sqlite" in html.split("<footer>", 1)[1]


def test_speedup_chart_is_device_by_configuration(page: _Page) -> None:
    fig = page.figure("speedup")
    assert [t["name"] for t in fig["data"]] == ["host", "rpi5"]  # npu-sim has no fp32 baseline
    host, rpi5 = fig["data"]
    assert host["base"] == 1.0 and host["y"] == rpi5["y"]  # one category axis, grouped per device
    families = host["y"]
    best = families.index("executorch/xnnpack>portable/fp32")
    assert host["text"][best] == "8.60×" and rpi5["text"][best] == "9.01×"
    # rpi5's dynamic int8 was only ever infeasible: its bar is hatched.
    dyn = families.index("executorch/xnnpack>portable/dynamic_int8(per_channel)")
    assert rpi5["marker"]["pattern"]["shape"][dyn] == "/" and host["x"][dyn] is None
    assert "No fp32 baseline was measured on npu-sim" in page.visible


def test_partition_map_shows_backends_partitions_and_fallbacks() -> None:
    host_best = sample_devices()[0].records[1]
    fig = figures.partition_map(host_best)
    rows = {t.y[0]: t for t in fig.data}
    assert list(rows) == ["nodes by backend", "delegated partitions", "fell back"]
    assert list(rows["nodes by backend"].text) == ["xnnpack: 17", "portable (fallback): 7"]
    assert list(rows["delegated partitions"].x) == [4, 2, 2, 2, 2, 2, 2, 1]
    assert list(rows["delegated partitions"].base) == [0, 4, 6, 8, 10, 12, 14, 16]  # side by side
    assert list(rows["fell back"].text) == ["native_group_norm ×7"]
    # Eager PyTorch declares no fallback backend: what ran outside the order (cpu) is the fallback.
    eager = sample_devices()[0].records[0]
    assert list(figures.partition_map(eager).data[0].text) == ["cpu (fallback): 24"]


def test_script_content_cannot_break_out_of_its_element(tmp_path: Path) -> None:
    devices = sample_devices()
    host = devices[0]
    evil = dataclasses.replace(host.records[7], reason="</script><script>alert(1)</script>")
    records = (*host.records[:7], evil, *host.records[8:])
    html = render_report(sample_spec(), [dataclasses.replace(host, records=records)])
    assert "<script>alert(1)" not in html
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    parsed = _Page()
    parsed.feed(html)
    for attrs, body in parsed.scripts:
        if attrs.get("type") == "application/json":
            json.loads(body)  # each data block is whole


def test_write_report_writes_a_readable_file_atomically(tmp_path: Path) -> None:
    out = write_report(sample_spec(), sample_devices(), tmp_path / "sub" / "report.html", links=sample_links())
    assert out == tmp_path / "sub" / "report.html"
    assert out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_a_device_without_trials_still_gets_a_section() -> None:
    html = render_report(sample_spec(), [DeviceTrials("host", ())])
    assert "No feasible measured trial yet" in html and "no measured trial yet" in html


def test_importing_the_report_module_does_not_import_plotly() -> None:
    code = "import sys, nnsweep, nnsweep.report.html; print('plotly' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- reading a real study, and publishing through a tracker ---------------------------------------


@pytest.fixture
def studied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The sample's host trials stored in an Optuna journal study, as the coordinator stores them."""
    from nnsweep.sweep import studies
    from nnsweep.sweep.lifecycle import Role

    monkeypatch.chdir(tmp_path)  # the spec's state (.nnsweep/) lives in the working directory
    spec = sample_spec()
    study = studies.open_study(spec, "host")
    for record in sample_devices()[0].records:
        studies.enqueue(study, {}, Role.BASELINE if record.number == 0 else Role.SEARCH)
        trial = study.ask()
        if record.status in (TrialStatus.OK, TrialStatus.REUSED):
            values = [record.metrics["accuracy"], record.metrics["latency_p50_ms"]]
            studies.tell_record(study, trial, record, values, {})
        else:
            studies.tell_failure(study, trial, record, record.reason or "failed")
    return spec


def test_load_device_reads_the_study_and_finds_the_baseline(studied: Any) -> None:
    host = load_device(studied, "host")
    assert host.baseline == 0 and host.baseline_record() is not None
    assert [r.number for r in host.records] == list(range(9))
    assert load_device(studied, "rpi5") == DeviceTrials("rpi5", ())  # never ran there


def test_publish_report_links_runs_and_logs_the_file_without_creating_runs(studied: Any, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from nnsweep.tracking import MlflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sweep = MlflowTracker(uri, studied.experiment, studied.name)  # what `nnsweep run` logged
    sweep.open_device("host", {"arch": "x86_64"})
    for record in sample_devices()[0].records:
        sweep.start_trial("host", record.number, record.config)
        sweep.finish_trial(record)
    sweep.close_device("host")

    reader = MlflowTracker(uri, studied.experiment, studied.name)  # what `nnsweep report` opens
    out = publish_report(studied, tmp_path / "report.html", reader)
    client = MlflowClient(uri)
    runs = client.search_runs([reader.experiment_id])
    host = next(r for r in runs if r.info.run_name == "host")
    assert [a.path for a in client.list_artifacts(host.info.run_id)] == [REPORT_ARTIFACT]
    # Every trial is linked; rpi5 and npu-sim have no runs and get none made for them.
    link = sweep.trial_links("host")[1]
    assert f'href="http://127.0.0.1:5000/{link}"' in out.read_text(encoding="utf-8")
    assert {r.info.run_name for r in runs if r.data.tags.get("nnsweep.kind") == "device"} == {"host"}
    assert all(r.info.status != "RUNNING" for r in runs)  # reading did not reopen the device's run


def test_report_command_writes_the_file_and_refuses_a_sweep_that_never_ran(
    studied: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    from nnsweep.cli import main

    spec_file = tmp_path / "sample.yaml"
    sample = {"name": "sample", "model": "digits_gn", "devices": ["host", "rpi5", "npu-sim"]}
    spec_file.write_text(yaml.safe_dump({**sample, "constraints": {"max_accuracy_drop": 0.01}}), encoding="utf-8")
    assert main(["report", str(spec_file), "--no-tracking", "--out", "out/r.html"]) == 0
    written = tmp_path / "out" / "r.html"
    assert f"{written.relative_to(tmp_path)} ({written.stat().st_size:,} bytes)" in capsys.readouterr().out
    assert 'Best on host: <span class="best-label">#1 ' in written.read_text(encoding="utf-8")

    other = tmp_path / "other.yaml"
    other.write_text("name: other\nmodel: digits\n", encoding="utf-8")
    assert main(["report", str(other)]) == 2
    assert "run `nnsweep run" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists() and not (tmp_path / "mlflow.db").exists()
    assert main(["report", str(tmp_path / "missing.yaml")]) == 2


def test_failed_trials_stay_out_of_every_plot(page: _Page) -> None:
    for attrs, body in page.scripts:
        if attrs.get("type") == "application/json":
            assert "BenchmarkError" not in body


def test_records_round_trip_through_the_sample() -> None:
    # The sample is what the coordinator would store: records survive to_dict/from_dict unchanged.
    for device in sample_devices():
        for r in device.records:
            assert TrialRecord.from_dict(r.to_dict()) == r
            assert isinstance(r.config, DeploymentConfig)


def test_overview_shows_the_one_configuration_for_every_device_and_its_cost() -> None:
    from nnsweep.sweep.front import best_across_devices

    devices = sample_devices()[:2]  # host and rpi5 measured the same configurations; npu-sim did not
    spec = dataclasses.replace(sample_spec(), devices=("host", "rpi5"))
    shared = best_across_devices({d.device: d.records for d in devices}, spec.objectives)
    assert shared is not None
    parsed = _Page()
    parsed.feed(render_report(spec, devices))
    text = parsed.visible
    assert "One configuration for every device" in text
    assert f"Ship {shared.config.label()} to every device" in text
    assert f"is {shared.worst_slowdown:.2f}x" in text
    rpi5 = next(c for c in shared.costs if c.device == "rpi5")
    assert rpi5.own_best.number != rpi5.record.number and f"{rpi5.slowdown:.2f}x" in text
    assert f"{rpi5.own_best.config.label()} (#{rpi5.own_best.number})" in text
    host = next(c for c in shared.costs if c.device == "host")
    assert host.slowdown == 1.0  # the host's own best is the shared configuration


def test_overview_says_why_there_is_no_shared_configuration(page: _Page) -> None:
    # the sample's npu-sim shares no feasible configuration with the others
    assert "No configuration was measured and feasible on every device" in page.visible
    one = _Page()
    one.feed(render_report(dataclasses.replace(sample_spec(), devices=("host",)), sample_devices()[:1]))
    assert "One device: its best configuration is the one to ship." in one.visible


def test_emulated_latencies_are_labelled_in_the_overview_and_counts() -> None:
    devices = sample_devices()
    rpi5 = next(d for d in devices if d.device == "rpi5")
    emulated = dataclasses.replace(rpi5, records=tuple(dataclasses.replace(r, emulated=True) for r in rpi5.records))
    parsed = _Page()
    parsed.feed(render_report(sample_spec(), [emulated if d is rpi5 else d for d in devices]))
    text = parsed.visible
    assert f"rpi5: {BEST['rpi5']} (latency emulated)" in text
    assert "Latencies marked 'emulated' were timed on an emulated board" in text
    assert "On rpi5 the speed-ups are ratios of latencies timed under emulation." in text
    measured = sum(1 for r in rpi5.records if r.status.measured)
    assert f"{measured} with latency timed under emulation (qemu-user)" in text
    assert "(latency emulated)" not in text.split("rpi5:")[0]  # the host's best is a real measurement


def test_int8_trials_measured_float_are_labelled_in_the_overview_and_counts() -> None:
    devices = sample_devices()
    rpi5 = next(d for d in devices if d.device == "rpi5")
    floats = tuple(
        dataclasses.replace(r, metrics={**r.metrics, "sqnr_db": 140.0}) if r.config.quant.mode.is_int8 else r
        for r in rpi5.records
    )
    parsed = _Page()
    swept = [dataclasses.replace(rpi5, records=floats) if d is rpi5 else d for d in devices]
    parsed.feed(render_report(sample_spec(), swept))
    text = parsed.visible
    counted = sum(1 for r in floats if r.float_in_effect and r.status.measured)
    assert counted and f"{counted} int8 float in effect (outputs within float32's rounding of fp32's)" in text
    assert f"rpi5: {BEST['rpi5']} (float in effect)" in text  # its best is static int8
    assert "float in effect" not in text.split("rpi5:")[0]  # the host's trials measured int8 noise


def test_remeasured_figures_show_their_interval_and_flag_a_sweep_figure_off_by_10_percent(page_html: str) -> None:
    # the best (#1): sweep 0.0341 ms, re-measured median 0.0297 ms [0.0290, 0.0322]: +15 %, flagged
    assert '<span class="interval flag"' in page_html and "sweep read 0.0341 ms (+15%)" in page_html
    # the baseline (#0): within 10 %, shown with its interval but not flagged; named under the speed-up chart
    assert "[0.2501 ms, 0.2630 ms] (88%)<" in page_html
    assert "The fp32 baseline on host: p50 0.2553 ms, re-measured [0.2501 ms, 0.2630 ms] (88%)." in page_html


def test_the_report_shows_each_layer_ranking_the_sweep_used() -> None:
    from nnsweep.dashboards.sample import sample_devices, sample_spec
    from nnsweep.report.html import render_report
    from nnsweep.sensitivity.rank import LayerSensitivity, SensitivityReport

    report = SensitivityReport(
        0.2, 0.99, (LayerSensitivity("blocks.2.dw", 0.0, 0.30), LayerSensitivity("head", 0.0, 0.985)), 4.0, 4
    )
    html_text = render_report(sample_spec(), sample_devices(), sensitivity=[("onnxruntime", "per_tensor", report)])
    card = html_text[html_text.index('data-runtime="onnxruntime"') :]
    assert "Layer sensitivity: onnxruntime, static int8 per_tensor" in card
    # ranked by what quantizing each alone costs: blocks.2.dw (69 points) before head (0.5)
    assert card.index("<code>blocks.2.dw<") < card.index("<code>head<") and "+69.00" in card and "+0.50" in card
