"""The ratio of medians (nnsweep / random search given the same starts) and its 95 % bootstrap interval.

Reads the per-seed runs that ``benchmarks/search_replay.py --json FILE`` writes and resamples
the seeds of each strategy (10,000 resamples, seeded), for the trials to the best and to 99 %
of the hypervolume. Example::

    .venv/bin/python benchmarks/search_replay.py benchmarks/data/search_table_se_threads1.json --seeds 20 \\
        --strategy "nnsweep: " --strategy "random (no replacement) after" --json /tmp/se.json
    .venv/bin/python benchmarks/replay_interval.py /tmp/se.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from pathlib import Path

RANDOM = "random (no replacement) after nnsweep's starts"
RESAMPLES = 10_000


def interval(ours: list[float], theirs: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The ratio of medians and its 2.5 and 97.5 percentiles over bootstrap resamples of the seeds."""
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(ours, k=len(ours))) / statistics.median(rng.choices(theirs, k=len(theirs)))
        for _ in range(RESAMPLES)
    )
    return statistics.median(ours) / statistics.median(theirs), ratios[RESAMPLES // 40], ratios[RESAMPLES * 39 // 40]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="search_replay.py's --json output")
    args = parser.parse_args()
    runs = json.loads(args.runs.read_text())
    ours = runs[next(k for k in runs if k.startswith("nnsweep: "))]
    for metric in ("best_at", "hv_at"):
        a, b = [r[metric] for r in ours], [r[metric] for r in runs[RANDOM]]
        if None in a or None in b:
            print(f"{metric}: some seeds never reached it")
            continue
        ratio, low, high = interval(a, b)
        print(
            f"{metric}: {statistics.median(a):g} / {statistics.median(b):g} = {ratio:.2f}, "
            f"95 % interval {low:.2f}-{high:.2f}; random search's seeds {min(b):g} to {max(b):g}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
