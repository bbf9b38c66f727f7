"""Time to the answer: real sweeps per model, seed and strategy, timed from the Optuna storage.

Each run is ``nnsweep.api.sweep`` as a user runs it (the scheduler's depth, the
conversions, the re-measure of the front), on this machine, with a cold artifact cache of
its own, and ``search.strategy`` / ``search.seed`` choosing what proposes:

* ``nnsweep``: the starts (default deployments, mode starts), the coordinator's moves, its sampler;
* ``random``: the same starts, then Optuna's ``RandomSampler``;
* ``optuna``: the default deployments only, then Optuna's default sampler (as a user of Optuna alone).

For each run it reports the trials (measurements, reuses excluded) and wall seconds until
the run's final best (what ``nnsweep best`` picks) was first measured, and until the
feasible trials measured so far reached 99 % of the final front's hypervolume (accuracy
up, p50 latency down). Wall seconds run from the call to ``sweep`` to the trial's
``datetime_complete`` in the Optuna storage. The summary gives medians and the range over
seeds per model and strategy, held-out and in-sample models in separate columns.

Held-out models are ``benchmarks/tta_models.py`` (chosen before the search changes they
judge); in-sample ones are those the search was designed on (``digits_outlier``).
Results go to ``benchmarks/results/time_to_answer_<date>.json``. Small run::

    .venv/bin/python benchmarks/time_to_answer.py --models tta_depthwise --seeds 2 --trials 12
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tta_models import FAILURE, MODELS  # noqa: E402

STRATEGIES = ("nnsweep", "random", "optuna")
IN_SAMPLE = {"digits_outlier": "digits_outlier"}  # the search's moves were designed on its table
HV_SHARE = 0.99


def model_ref(name: str) -> str:
    return f"{HERE / 'tta_models.py'}:{name}" if name in MODELS else IN_SAMPLE[name]


def spec_for(
    name: str, strategy: str, seed: int, trials: int, runtimes: Sequence[str], folder: Path, max_drop: float = 0.01
) -> dict[str, Any]:
    """One run's sweep: the model, one host device, int8 modes with layers kept float."""
    return {
        "name": f"tta-{name}-{strategy}-{seed}",
        "model": model_ref(name),
        "devices": ["host"],
        "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
        "constraints": {"max_accuracy_drop": max_drop},
        "space": {
            "runtime": list(runtimes),
            "quant": ["fp32", "dynamic_int8", "static_int8"],
            "granularity": ["per_tensor", "per_channel"],
            "float_layers": {"low": 0, "high": 3},
            "threads": [1],
        },
        "budget": {"trials": trials},
        "measure": {"warmup": 3, "iters": 50},
        "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}"},
        "storage": f"sqlite:///{folder / 'optuna.db'}",
        "search": {"strategy": strategy, "seed": seed, "mode_starts": strategy != "optuna", "profile": "none"},
    }


def hypervolume(points: Sequence[tuple[float, float]], ref: tuple[float, float]) -> float:
    """2-D hypervolume of (accuracy up, latency down) points against ``ref`` (worse in both)."""
    front = sorted({(a, lat) for a, lat in points if a > ref[0] and lat < ref[1]}, key=lambda p: p[1])
    volume, best_acc = 0.0, ref[0]
    for i, (acc, lat) in enumerate(front):
        best_acc = max(best_acc, acc)
        right = front[i + 1][1] if i + 1 < len(front) else ref[1]
        volume += (best_acc - ref[0]) * (right - lat)
    return volume


def run_one(
    name: str, strategy: str, seed: int, trials: int, runtimes: Sequence[str], tracking: bool, max_drop: float = 0.01
) -> dict[str, Any]:
    """One sweep in a fresh folder and cache; its trials' timings from the Optuna storage."""
    import optuna

    from nnsweep.api import sweep
    from nnsweep.core.results import TrialStatus

    folder = Path(tempfile.mkdtemp(prefix="tta-"))
    cwd = Path.cwd()
    spec = spec_for(name, strategy, seed, trials, runtimes, folder, max_drop)
    load_before = os.getloadavg()[0]
    os.chdir(folder)  # the report and the sweep's state land here
    try:
        t0 = time.time()
        (result,) = sweep(spec, cache_dir=folder / "cache", tracking=tracking, fresh=True)
        wall = time.time() - t0
        study = optuna.load_study(study_name=f"{spec['name']}/host", storage=spec["storage"])
        done = {t.number: t.datetime_complete.timestamp() for t in study.get_trials() if t.datetime_complete}
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder, ignore_errors=True)
    measured = sorted(
        (
            r
            for r in result.records
            if r.reused_from is None and r.status is not TrialStatus.REUSED and r.number in done
        ),
        key=lambda r: done[r.number],
    )
    order = {r.number: i + 1 for i, r in enumerate(measured)}
    feasible = [r for r in measured if r.feasible and "accuracy" in r.metrics and "latency_p50_ms" in r.metrics]
    row: dict[str, Any] = {
        "model": name,
        "held_out": name in MODELS,
        "strategy": strategy,
        "seed": seed,
        "budget": trials,
        "max_accuracy_drop": max_drop,
        "measured": len(measured),
        "wall_s": round(wall, 1),
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
        "trials": [
            {
                "number": r.number,
                "status": r.status.value,
                "feasible": r.feasible,
                "reused_from": r.reused_from,
                "config": r.config.to_dict(),
                "accuracy": r.metrics.get("accuracy"),
                "latency_p50_ms": r.metrics.get("latency_p50_ms"),
                "wall_s": round(done[r.number] - t0, 1) if r.number in done else None,
            }
            for r in sorted(result.records, key=lambda r: r.number)
        ],
    }
    best = result.best
    if best is not None:
        first = best.reused_from if best.reused_from is not None else best.number
        row["best"] = {
            "config": best.config.to_dict(),
            "latency_p50_ms": best.metrics.get("latency_p50_ms"),
            "accuracy": best.metrics.get("accuracy"),
            "trial": first,
        }
        row["best_trials"] = order.get(first)
        row["best_wall_s"] = round(done[first] - t0, 1) if first in done else None
    if feasible:
        accs = [r.metrics["accuracy"] for r in feasible]
        lats = [r.metrics["latency_p50_ms"] for r in feasible]
        ref = (min(accs) - 0.1 * max(max(accs) - min(accs), 0.01), max(lats) + 0.1 * max(max(lats) - min(lats), 1e-3))
        final = hypervolume(list(zip(accs, lats, strict=True)), ref)
        for i in range(1, len(feasible) + 1):
            hv = hypervolume([(r.metrics["accuracy"], r.metrics["latency_p50_ms"]) for r in feasible[:i]], ref)
            if hv >= HV_SHARE * final:
                row["hv99_trials"] = order[feasible[i - 1].number]
                row["hv99_wall_s"] = round(done[feasible[i - 1].number] - t0, 1)
                break
    return row


def _stat(values: Sequence[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "never"
    missing = f", {len(values) - len(got)} never" if len(got) < len(values) else ""
    return f"{statistics.median(got):g} [{min(got):g}-{max(got):g}{missing}]"


def common_targets(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model, the configuration every run is timed to: the final best with the lowest p50
    among all runs' (each run's own best differs where its figures do)."""
    targets: dict[str, dict[str, Any]] = {}
    for r in rows:
        best = r.get("best")
        if best is None or best.get("latency_p50_ms") is None:
            continue
        held = targets.get(r["model"])
        if held is None or best["latency_p50_ms"] < held["latency_p50_ms"]:
            targets[r["model"]] = best
    return targets


def to_common(row: dict[str, Any], target: dict[str, Any] | None) -> float | None:
    """Wall seconds until ``row``'s run first measured the common target, feasible (None: never)."""
    if target is None:
        return None
    hits = [
        t["wall_s"]
        for t in row["trials"]
        if t["config"] == target["config"] and t["feasible"] and t["reused_from"] is None and t["wall_s"] is not None
    ]
    return min(hits) if hits else None


def common_summary(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: per model and strategy, wall seconds to the best configuration any run found."""
    targets = common_targets(rows)
    lines = ["| model | the best any run found | strategy | runs | s to it: median [range] |", "|---" * 5 + "|"]
    keys = sorted({(r["model"], r["strategy"]) for r in rows}, key=lambda k: (k[0], STRATEGIES.index(k[1])))
    for model, strategy in keys:
        runs = [r for r in rows if r["model"] == model and r["strategy"] == strategy]
        target = targets.get(model)
        what = "-" if target is None else _label(target["config"])
        lines.append(f"| {model} | {what} | {strategy} | {len(runs)} | {_stat([to_common(r, target) for r in runs])} |")
    return "\n".join(lines)


def _label(config: dict[str, Any]) -> str:
    q = config["quant"]
    extra = [q.get("granularity"), q.get("calibration")] + (
        [f"{len(q['float_layers'])} float"] if q.get("float_layers") else []
    )
    return f"{config['runtime']} {q['mode']}" + "".join(f" {e}" for e in extra if e)


def summary(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: per model and strategy, median [min-max] over seeds, held-out and in-sample apart."""
    lines = [
        "| model | strategy | seeds | held-out: best trials | held-out: best s | held-out: 99 % HV trials"
        " | held-out: 99 % HV s | in-sample: best trials | in-sample: best s | in-sample: 99 % HV trials"
        " | in-sample: 99 % HV s |",
        "|---" * 11 + "|",
    ]
    keys = sorted({(r["model"], r["strategy"]) for r in rows}, key=lambda k: (k[0], STRATEGIES.index(k[1])))
    for model, strategy in keys:
        runs = [r for r in rows if r["model"] == model and r["strategy"] == strategy]
        cells = [_stat([r.get(k) for r in runs]) for k in ("best_trials", "best_wall_s", "hv99_trials", "hv99_wall_s")]
        blank = ["-"] * 4
        held = runs[0]["held_out"]
        lines.append(
            f"| {model} | {strategy} | {len(runs)} | " + " | ".join(cells + blank if held else blank + cells) + " |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"of {', '.join([*MODELS, *IN_SAMPLE])}")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds run are first-seed .. first-seed + seeds - 1")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--runtimes", default="onnxruntime")
    parser.add_argument(
        "--max-accuracy-drop", type=float, default=0.01, help="the sweep's bound on the drop in agreement with fp32"
    )
    parser.add_argument("--tracking", action="store_true", help="log to MLflow too (as a user's sweep does)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--merge", type=Path, nargs="+", help="only print the summary of these results files")
    args = parser.parse_args(argv)
    if args.merge:
        rows = [row for path in args.merge for row in json.loads(path.read_text())["runs"]]
        print(summary(rows) + "\n\n" + common_summary(rows))
        return 0
    models, strategies = args.models.split(","), args.strategies.split(",")
    for m in models:
        if m not in MODELS and m not in IN_SAMPLE:
            parser.error(f"unknown model {m}")
    out = args.out or HERE / "results" / f"time_to_answer_{dt.date.today():%Y%m%d}.json"
    rows: list[dict[str, Any]] = []
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    for model in models:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for strategy in strategies:
                row = run_one(
                    model, strategy, seed, args.trials, args.runtimes.split(","), args.tracking, args.max_accuracy_drop
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
                out.write_text(
                    json.dumps(
                        {
                            "started": started,
                            "args": {k: str(v) for k, v in vars(args).items()},
                            "failure_kinds": {m: FAILURE.get(m, "in-sample") for m in models},
                            "runs": rows,
                        },
                        indent=1,
                    )
                )
    print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
