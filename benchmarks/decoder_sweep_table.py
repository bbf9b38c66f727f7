"""A decoder sweep's trials as a Markdown table: each configuration measured (repeats told
free are left out), its perplexity and per-token figures as the study decided them (the
front's re-measured), and whether it is on the device's front.

    python benchmarks/decoder_sweep_table.py sweeps/tiny_llama.yaml [--device host]

Run it in the folder the sweep ran in (its journal is beside the spec it was given).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nnsweep.core.metrics import DECODE_PER_TOKEN, PERPLEXITY, PREFILL, SIZE, TOKENS_PER_S, remeasured
from nnsweep.spec import load_spec
from nnsweep.sweep.front import pareto_front
from nnsweep.sweep.studies import open_study, study_records


def table(spec_path: Path, device: str) -> str:
    spec = load_spec(spec_path)
    records = [r for r in study_records(open_study(spec, device, create=False)) if r.status.measured]
    front = {r.number for r in pareto_front(records, spec.objectives)}
    head = ["#", "configuration", "perplexity", "decode ms/token", "re-measured", "prefill ms", "tokens/s"]
    head += ["size (KiB)", "front"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted((r for r in records if r.reused_from is None), key=lambda r: r.metrics[DECODE_PER_TOKEN]):
        m = r.metrics
        again = "yes" if remeasured("latency_p50_ms") in m else ""
        on_front = "**yes**" if r.number in front else ""
        rows.append(
            f"| {r.number} | {r.config.label()} | {m[PERPLEXITY]:.4f} | {m[DECODE_PER_TOKEN]:.3f} | {again} | "
            f"{m[PREFILL]:.3f} | {m[TOKENS_PER_S]:.0f} | {m[SIZE] / 1024:,.0f} | {on_front} |"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--device", default="host")
    args = parser.parse_args(argv)
    sys.stdout.write(table(args.spec, args.device) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
