"""Replay cost-aware proposals (benchmarks/cost_model.py) against the measured tables, in seconds.

Per table and seed: nnsweep's search as it is, nnsweep's search with cost-aware
proposals (the sampler's proposals predicted dominated not converted; with ``pool``, the
untried candidate of highest expected gain per second enqueued when there is no move),
and random search given the same starts. Seconds are the table's: each configuration's
conversion seconds split into its stage's and its lowering's
(``search_replay._split_seconds``; a stage already converted costs nothing) plus the
table's measuring seconds per measurement. Also: each candidate the cost model skipped,
and whether the exhaustive table puts it on the feasible front.

Usage:
    .venv/bin/python benchmarks/cost_replay.py benchmarks/data/search_table_se_threads1.json --seeds 10
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cost_model import CostConfig
from search_replay import SAME_STARTS, Run, Strategy, Table, evaluate, nnsweep_strategy, random_with_starts

TODAY = "nnsweep (today)"
GATE = "nnsweep + cost gate"
POOL = "nnsweep + cost gate + gain/s pool"
MOVES = "nnsweep + cost gate on sampler and refinements + gain/s pool"


def strategies(config: CostConfig) -> dict[str, Strategy]:
    """The strategies compared (name -> strategy)."""
    return {
        SAME_STARTS: random_with_starts,
        TODAY: nnsweep_strategy(),
        GATE: nnsweep_strategy(cost=config, pool=False),
        POOL: nnsweep_strategy(cost=config, pool=True),
        MOVES: nnsweep_strategy(cost=config, pool=True, gate_moves=True),
    }


def _med(runs: list[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def _fmt(x: float, digits: int = 0) -> str:
    return "never" if x == math.inf else f"{x:.{digits}f}"


def _range(runs: list[Run], attr: str) -> str:
    values = [getattr(r, attr) for r in runs]
    return f"{_fmt(min(values))}–{_fmt(max(values))}"


def ratio_interval(runs: list[Run], base: list[Run], attr: str, resamples: int = 10_000) -> str:
    """The ratio of medians of ``attr`` to ``base``'s, with its 95 % bootstrap interval
    (each strategy's seeds resampled, 10,000 times, seed 0)."""
    a, b = [getattr(r, attr) for r in runs], [getattr(r, attr) for r in base]
    if math.inf in a or math.inf in b:
        return "-"
    rng = random.Random(0)
    ratios = sorted(
        statistics.median(rng.choices(a, k=len(a))) / statistics.median(rng.choices(b, k=len(b)))
        for _ in range(resamples)
    )
    low, high = ratios[int(0.025 * resamples)], ratios[int(0.975 * resamples) - 1]
    return f"{statistics.median(a) / statistics.median(b):.2f} ({low:.2f}–{high:.2f})"


def skipped_on_front(table: Table, runs: list[Run]) -> tuple[int, int, int]:
    """Skip decisions, those of a configuration on the table's feasible front, and of
    those, the ones the run never measured afterwards."""
    front = set(table.front)
    total = on = missed = 0
    for run in runs:
        measured = set(run.measured)
        for digest in run.skipped:
            total += 1
            values = table.outcomes[digest].values
            if values is not None and table.feasible(values) and values in front:
                on += 1
                missed += digest not in measured
    return total, on, missed


def report(table: Table, results: dict[str, list[Run]]) -> str:
    """One Markdown table: medians over seeds, and ratios to random search given the same starts."""
    ref = results[SAME_STARTS]
    lines = [
        f"table {table.name}: {len(table.configs)} configurations, {table.measurements} measurements, "
        f"{sum(table.convert_s.values()):.0f} s converting as built, {table.measure_s:.2f} s per measurement",
        "",
        "| strategy | seeds | s to best | s to 99 % HV (seeds' range) | trials to best | trials to 99 % HV "
        "| s ratio vs random (best / HV) | trials ratio vs random (best / HV) | skips (on front, never measured) "
        "| sampler's proposals / gain-per-second picks per run | s to 99 % HV vs today (95 % interval) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in results.items():
        bs, hs, bt, ht = (_med(runs, a) for a in ("best_s", "hv_s", "best_at", "hv_at"))
        sr = f"{bs / _med(ref, 'best_s'):.2f} / {hs / _med(ref, 'hv_s'):.2f}"
        tr = f"{bt / _med(ref, 'best_at'):.2f} / {ht / _med(ref, 'hv_at'):.2f}"
        total, on, missed = skipped_on_front(table, runs)
        lines.append(
            f"| {name} | {len(runs)} | {_fmt(bs)} | {_fmt(hs)} ({_range(runs, 'hv_s')}) "
            f"| {_fmt(bt)} | {_fmt(ht)} | {sr} | {tr} "
            f"| {total} ({on}, {missed}) | {_med(runs, 'sampled'):g} / {_med(runs, 'picked'):g} "
            f"| {ratio_interval(runs, results[TODAY], 'hv_s')} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tables", type=Path, nargs="+")
    parser.add_argument("--load", type=Path, help="report the runs a --json of the same tables wrote, not replay")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--margin", type=float, default=CostConfig.margin)
    parser.add_argument("--prior-weight", type=float, default=CostConfig.prior_weight)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write every run as JSON here")
    args = parser.parse_args()
    config = CostConfig(margin=args.margin, prior_weight=args.prior_weight)
    dump: dict[str, dict[str, list[dict[str, object]]]] = {}
    for path in args.tables:
        table = Table.load(path)
        if args.load is not None:
            saved = json.loads(args.load.read_text())[table.name]
            results = {name: [Run(**r) for r in runs] for name, runs in saved.items()}
        else:
            summaries = evaluate(table, strategies(config), range(args.seeds), args.jobs)
            results = {s.name: s.runs for s in summaries}
        print(report(table, results) + "\n", flush=True)
        dump[table.name] = {name: [r.__dict__ for r in runs] for name, runs in results.items()}
    if args.json and args.load is None:
        args.json.write_text(json.dumps(dump, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
