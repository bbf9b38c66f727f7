"""What a person sees: the HTML report and the MLflow UI in a real browser (headless Chromium).

Debian's ``chromium`` (``/usr/bin/chromium``, installed by ``make install``) is driven by
Playwright through ``executable_path``; Playwright never downloads a browser of its own
here. The report is opened with the network off (offline context, a dead proxy, every
request that is not the file itself recorded and aborted); the MLflow UI is served on
127.0.0.1 only. Screenshots land in the test's ``tmp_path`` (run with ``-s`` to see where).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.network import free_port

from nnsweep.dashboards.sample import sample_devices, sample_links, sample_spec
from nnsweep.report.html import REPORT_ARTIFACT, write_report

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's Chromium at /usr/bin/chromium (`apt-get install chromium`; `make install` does it)",
    ),
]

# Flags that work headless as root in a container; networking is cut by a proxy that does not
# exist (127.0.0.1:9, the discard port; loopback itself bypasses proxies, so a local MLflow works).
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--proxy-server=127.0.0.1:9",
]
VIEWPORT = {"width": 1400, "height": 1000}
BEST = {
    "host": "#1 executorch/xnnpack>portable/fp32/t1",
    "rpi5": "#2 executorch/xnnpack>portable/static_int8(per_channel)/t1",
    "npu-sim": "#0 executorch/xnnpack>portable/static_int8(per_tensor)/t1",
}
# What each kind of plot has drawn once plotly has rendered data into it.
DRAWN = {
    "scatter": ".scatterlayer path.point",
    "bar": ".barlayer .point path",
    "box": ".boxlayer path.box",
}


class _Watch:
    """Console errors, uncaught exceptions, failed responses and requests leaving the allowed origin."""

    def __init__(self, page: Any, allowed: str) -> None:
        self.errors: list[str] = []
        self.failed: list[str] = []
        self.blocked: list[str] = []
        self.allowed = allowed
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        page.context.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.allowed):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()


def _wait_for_plots(page: Any) -> int:
    """Wait until report.js has drawn every plot; check each is sized and has data drawn. Returns how many."""
    plots = page.locator("div.plot")
    count = int(plots.count())
    page.wait_for_selector(f'body[data-plots-rendered="{count}"]', timeout=30_000)
    for i in range(count):
        plot = plots.nth(i)
        name, kind = plot.get_attribute("id"), plot.get_attribute("data-kind") or ""
        box = plot.locator(".main-svg").first.bounding_box()
        assert box is not None and box["width"] > 300 and box["height"] > 100, name
        assert plot.locator(DRAWN[kind]).count() > 0, f"{name}: nothing drawn"
    return count


@contextlib.contextmanager
def _browser(*, offline: bool) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Playwright starts Chromium with a fresh temporary profile (its own --user-data-dir).
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS, timeout=60_000)
        try:
            context = browser.new_context(offline=offline, viewport=VIEWPORT)
            yield context
        finally:
            browser.close()


def test_report_renders_offline_with_plots_names_best_configs_and_no_errors(tmp_path: Path) -> None:
    report = write_report(sample_spec(), sample_devices(), tmp_path / "report.html", links=sample_links())
    with _browser(offline=True) as context:
        page = context.new_page()
        watch = _Watch(page, allowed=report.as_uri())
        page.goto(report.as_uri())
        count = _wait_for_plots(page)
        assert count == 9  # speed-up + 3 trade-offs + 3 partition maps + 2 latency plots (npu-sim: estimates)

        # The plots' toolbar offers no upload ("Share chart..." sends the figure to Plotly's cloud).
        titles = [b.get_attribute("data-title") or "" for b in page.locator(".modebar-btn").all()]
        assert titles and not [t for t in titles if "Share" in t]

        text = page.inner_text("body")
        for device, label in BEST.items():
            assert f"Best on {device}: {label}" in text
        assert text.count("estimate") >= 5  # card, table cells, note: the NPU's latencies are estimates

        # Hovering a point shows its configuration.
        point = page.locator("#tradeoff-host .scatterlayer .trace").first.locator("path.point").last
        point.scroll_into_view_if_needed()
        where = point.bounding_box()
        assert where is not None
        page.mouse.move(where["x"] + where["width"] / 2, where["y"] + where["height"] / 2)
        hover = page.locator("#tradeoff-host .hoverlayer .hovertext").first
        hover.wait_for(timeout=5_000)
        said = hover.text_content() or ""  # SVG text: no innerText
        assert "runtime:" in said and "quantization:" in said
        hover_shot = tmp_path / "report-hover.png"
        page.locator("#device-host .grid").screenshot(path=str(hover_shot))

        # A click on a column header sorts the table; failed trials (no latency) stay last.
        table = page.locator('table[data-device="host"]')
        header = table.locator("th", has_text="latency p50 (ms)").locator("button")
        first = table.locator("tbody tr").first
        last = table.locator("tbody tr").last
        header.click()
        assert (first.get_attribute("data-trial"), last.get_attribute("data-trial")) == ("1", "7")
        header.click()
        assert (first.get_attribute("data-trial"), last.get_attribute("data-trial")) == ("5", "7")

        page.mouse.move(0, 0)
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)

    print(f"\nreport {report} ({report.stat().st_size:,} bytes)\nscreenshots: {shot}, {hover_shot}")
    assert watch.errors == [], watch.errors
    assert watch.blocked == [], f"the report tried to reach the network: {watch.blocked}"


def test_report_of_a_real_sweep_renders_offline(tmp_path: Path) -> None:
    # Measured trials, not hand-made ones: a short sweep on this machine of the built-in model
    # whole-model int8 breaks, so the report has both explaining sections: where the time goes
    # in its front (profiles, on by default) and where the numbers diverge in the int8 trials
    # the accuracy bound turned away (explained by default).
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        "name: tiny\nmodel: digits_outlier\nbudget: {trials: 4}\nmeasure: {warmup: 1, iters: 20, remeasure: 0}\n"
        "constraints: {max_accuracy_drop: 0.01}\nsearch: {quality_first: false}\n"
        "space: {runtime: [executorch, onnxruntime], quant: [fp32, static_int8], threads: [1]}\n"
    )
    cmd = [sys.executable, "-m", "nnsweep.cli", "--cache-dir", str(tmp_path / "cache"), "run", str(spec),
           "--executor", "local", "--no-tracking"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = tmp_path / "reports" / "tiny.html"
    with _browser(offline=True) as context:
        page = context.new_page()
        watch = _Watch(page, allowed=report.as_uri())
        page.goto(report.as_uri())
        # speed-up, trade-off, partition map, latency distributions: all drawn from measurements
        assert _wait_for_plots(page) == 4
        best = page.locator(".best-label").first.inner_text()
        assert best.startswith("#") and best in proc.stdout  # the card names the best trial the CLI printed
        operators, divergence = page.locator(".card.operators").first, page.locator(".card.divergence").first
        assert operators.is_visible() and "Where the time goes, per operator: host" in operators.inner_text()
        assert divergence.is_visible() and "First below" in divergence.inner_text()
        assert divergence.locator("table tr").count() > 1  # its layers, drawn as a table
        shot = tmp_path / "real-report.png"
        page.screenshot(path=str(shot), full_page=True)
    print(f"\nreport {report} ({report.stat().st_size:,} bytes)\nscreenshot: {shot}")
    assert watch.errors == [], watch.errors
    assert watch.blocked == [], f"the report tried to reach the network: {watch.blocked}"


@contextlib.contextmanager
def _mlflow_ui(uri: str, log: Path) -> Iterator[str]:
    """``mlflow ui`` on a free loopback port, as ``nnsweep ui`` starts it; stopped (its process group) after."""
    port = free_port()
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]  # fmt: skip
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow ui exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                with direct.open(f"{url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow ui did not answer within 60 s:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def test_mlflow_ui_shows_the_sweep_and_the_report_logged_on_a_device_run(tmp_path: Path) -> None:
    from nnsweep.tracking import MlflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "sample", "sample")
    devices = sample_devices()
    for d in devices:
        tracker.open_device(d.device, {"arch": "x86_64"})
        for r in d.records:
            tracker.start_trial(d.device, r.number, r.config)
            tracker.finish_trial(r)
    links = {d.device: tracker.trial_links(d.device) for d in devices}
    report = write_report(sample_spec(uri), devices, tmp_path / "report.html", links=links)
    for d in devices:
        tracker.log_device_artifact(d.device, REPORT_ARTIFACT, report)
        tracker.close_device(d.device)
    experiment, host_run = tracker.experiment_id, tracker._parents["host"]

    with _mlflow_ui(uri, tmp_path / "mlflow-ui.log") as url, _browser(offline=False) as context:
        page = context.new_page()
        watch = _Watch(page, allowed=url)
        # The React UI renders after its API calls return: wait for what a person looks for.
        page.goto(f"{url}/#/experiments/{experiment}/runs")
        for name in ("sample", "host", "rpi5", "npu-sim"):
            page.get_by_text(name, exact=True).first.wait_for(timeout=60_000)
        # Expanding the host's run shows its trials as child runs, named "<device> #<trial> <config>".
        host_row = page.locator('[role="row"]', has_text="host").first
        host_row.locator('[col-id*="Run Name"] button').first.click()
        page.get_by_text("host #1 " + BEST["host"][3:], exact=True).first.wait_for(timeout=30_000)
        runs_shot = tmp_path / "mlflow-runs.png"
        page.screenshot(path=str(runs_shot))

        # The report is an artifact of the device's run, and MLflow's viewer shows it, plots drawn.
        page.goto(f"{url}/#/experiments/{experiment}/runs/{host_run}/artifacts")
        page.get_by_text(REPORT_ARTIFACT, exact=True).first.click(timeout=60_000)
        frame = page.frame_locator("iframe").first
        frame.locator("body[data-plots-rendered]").wait_for(timeout=30_000)
        assert frame.locator("#tradeoff-host .scatterlayer path.point").count() > 0
        assert "Best on host: " + BEST["host"] in frame.locator("body").inner_text()
        artifact_shot = tmp_path / "mlflow-report-artifact.png"
        page.screenshot(path=str(artifact_shot))

    print(f"\nscreenshots: {runs_shot}, {artifact_shot}")
    assert not [e for e in watch.errors if e.startswith("uncaught")], watch.errors
    # MLflow 3.17's UI asks for a signed-in user the open-source server does not have: its only 404.
    assert all(f.startswith("404 ") and f.endswith("/ajax-api/2.0/mlflow/users/current") for f in watch.failed), (
        watch.failed
    )
    assert watch.blocked == [], f"the MLflow UI tried to reach the network: {watch.blocked}"
