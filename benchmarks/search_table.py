"""Measure every configuration of a finite search space once on this machine: the tables
that ``benchmarks/search_replay.py`` replays search strategies against.

The space is the quickstart's (``sweeps/quickstart.yaml``: digits_gn over executorch,
onnxruntime and torch, every backend order, partition limits), made finite and small
enough to measure in about half an hour on a 2-core machine:

* ``qat_int8`` is left out: its conversion fine-tunes the model and costs more than the
  rest of a configuration together;
* ``min_nodes_per_partition`` is searched over 1..3 instead of 1..8;
* static int8 is calibrated with ``minmax`` only (not histogram or entropy);
* threads are fixed per table: each thread count is one "device" (one table).

Every configuration goes through the real code: ``nnsweep.artifacts.deploy.convert`` through an
``ArtifactCache`` (default ``~/.cache/nnsweep-search-table``), then measured as a
sweep's device agent measures it: ``measure_in_subprocess`` in a process forked from a
warm worker for the runtime (under the machine's measurement lock), evaluated by
``nnsweep.artifacts.deploy.assemble`` against the fp32 outputs. As in a sweep, an artifact whose bytes
equal one measured before, run the same way (runtime, backend order, threads), is
measured once and its result shared: partition limits that change nothing give equal
bytes. Artifact bytes do not depend on the thread count, so each configuration is
converted once (at the first thread count) and that artifact is measured at every
thread count. The raw latency samples of every measurement are kept in the table.

``--space outlier`` measures another space instead (:data:`OUTLIER_SPEC`): the
``digits_outlier`` model, which int8 hurts, over onnxruntime, executorch (XNNPACK and
portable kernels, partition limits) and torch, fp32 / dynamic / static int8, both
granularities and ``float_layers`` K in 0..3, one thread. The K layers an int8
configuration keeps float are named as a sweep names them: the runtime's own
sensitivity ranking (:func:`nnsweep.sensitivity.ranking.ranking`, measured once per
runtime and granularity into the cache, then read from it), top K. The rankings are
kept in the table's ``meta.rankings``, so a replay rebuilds the very same
configurations. ``--max-partitions``, ``--min-nodes`` and ``--float-layers`` narrow it.

``--space heldout`` measures the same space (:data:`HELDOUT_SPEC`) on a held-out model,
``benchmarks/heldout_model.py:heldout_mixer`` (an MLP-Mixer whose first channel MLP
carries activation outliers): a table the sampler was not designed on. The named
spaces share every code path; only their spec differs.

Usage (two processes, then merge; a killed run resumes where it stopped):
    .venv/bin/python benchmarks/search_table.py --shard 0 2 &
    .venv/bin/python benchmarks/search_table.py --shard 1 2
    .venv/bin/python benchmarks/search_table.py --merge 2
    # the outlier table (benchmarks/data/search_table_outlier_threads1.json), one process
    .venv/bin/python benchmarks/search_table.py --space outlier
    # the held-out table (benchmarks/data/search_table_heldout_threads1.json), one process
    .venv/bin/python benchmarks/search_table.py --space heldout --cache-dir ~/.cache/nnsweep-search-table-heldout
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from nnsweep.core.config import Calibration, DeploymentConfig, Granularity, QuantMode
from nnsweep.spec import IntRange, SweepSpec, load_spec, parse_spec
from nnsweep.sweep.space import DeviceSpace, LayersFor, device_space, suggest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SPEC = REPO / "sweeps" / "quickstart.yaml"
DEFAULT_QUANT = ("fp32", "dynamic_int8", "static_int8")
DEFAULT_MIN_NODES = (1, 3)
DEFAULT_CALIBRATION = ("minmax",)

OUTLIER_SPEC: dict[str, Any] = {
    "name": "search_table_outlier",
    "model": "digits_outlier",
    "devices": ["host"],
    "objectives": {"accuracy": "maximize", "latency_p50_ms": "minimize"},
    "constraints": {"max_accuracy_drop": 0.01},
    "space": {
        "runtime": ["onnxruntime", "executorch", "torch"],
        "quant": ["fp32", "dynamic_int8", "static_int8"],
        "granularity": ["per_tensor", "per_channel"],
        "calibration": ["minmax"],
        "backends": {"executorch": ["xnnpack", "portable"]},
        "max_delegated_partitions": [0, 1, 2],
        "min_nodes_per_partition": {"low": 1, "high": 2},
        "float_layers": {"low": 0, "high": 3},
        "threads": [1],
    },
    "measure": {"warmup": 5, "iters": 200},
}
"""The ``--space outlier`` table's spec: a model int8 hurts, mixed precision and partition limits."""

HELDOUT_SPEC: dict[str, Any] = {
    **OUTLIER_SPEC,
    "name": "search_table_heldout",
    # relative to this file's folder (see SPEC_SOURCE), so the table names no checkout's path
    "model": "heldout_model.py:heldout_mixer",
}
"""The ``--space heldout`` table's spec: :data:`OUTLIER_SPEC`'s space on the held-out model
(``benchmarks/heldout_model.py``), which the sampler was not designed on."""

HYBRID_SPEC: dict[str, Any] = {
    **OUTLIER_SPEC,
    "name": "search_table_hybrid",
    "model": "heldout_hybrid.py:heldout_hybrid",
}
"""The ``--space hybrid`` table's spec: the same space on the second held-out model
(``benchmarks/heldout_hybrid.py``), written after the moves were changed on the first."""

RESNET_SPEC: dict[str, Any] = {
    **OUTLIER_SPEC,
    "name": "search_table_resnet",
    "model": "heldout_resnet.py:heldout_resnet",
}
"""The ``--space resnet`` table's spec: the same space on the third held-out model
(``benchmarks/heldout_resnet.py``), written after the repair rule was changed on the second."""

TCN_SPEC: dict[str, Any] = {
    **OUTLIER_SPEC,
    "name": "search_table_tcn",
    "model": "heldout_tcn.py:heldout_tcn",
}
"""The ``--space tcn`` table's spec: the same space on the fourth held-out model
(``benchmarks/heldout_tcn.py``), written after the front's ascent was added to the moves."""

SE_SPEC: dict[str, Any] = {
    **OUTLIER_SPEC,
    "name": "search_table_se",
    "model": "heldout_se.py:heldout_se",
}
"""The ``--space se`` table's spec: the same space on the fifth held-out model
(``benchmarks/heldout_se.py``), written after the front's resplit was added to the moves."""

SPACES: dict[str, dict[str, Any]] = {
    "outlier": OUTLIER_SPEC,
    "heldout": HELDOUT_SPEC,
    "hybrid": HYBRID_SPEC,
    "resnet": RESNET_SPEC,
    "tcn": TCN_SPEC,
    "se": SE_SPEC,
}
"""The named spaces (``--space``), each an inline spec; ``quickstart`` reads ``--spec`` instead."""

SPEC_SOURCE = Path(__file__).resolve()
"""Where inline specs count as written: a relative model file is found beside this script."""


class _Enumerator:
    """A stand-in for ``optuna.Trial`` that walks one path of the define-by-run tree.

    ``path`` holds the index chosen at each decision; decisions past its end take the
    first option. ``widths`` records how many options each decision had, so the caller
    can advance to the next path (a depth-first walk of every configuration).
    """

    def __init__(self, path: list[int]) -> None:
        self.path = list(path)
        self.widths: list[int] = []

    def _choose(self, n: int) -> int:
        i = len(self.widths)
        self.widths.append(n)
        if i == len(self.path):
            self.path.append(0)
        return self.path[i]

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return choices[self._choose(len(choices))]

    def suggest_int(self, name: str, low: int, high: int, **_: Any) -> int:
        return low + self._choose(high - low + 1)


def enumerate_configs(space: DeviceSpace) -> list[DeploymentConfig]:
    """Every configuration :func:`nnsweep.sweep.space.suggest` can return for ``space``, each once."""
    out: dict[str, DeploymentConfig] = {}
    path: list[int] = []
    while True:
        walker = _Enumerator(path)
        config = suggest(walker, space)  # type: ignore[arg-type]
        out.setdefault(config.digest(), config)
        path = walker.path[: len(walker.widths)]
        while path and path[-1] + 1 >= walker.widths[len(path) - 1]:
            path.pop()
        if not path:
            return list(out.values())
        path[-1] += 1


def finite_spec(
    spec: SweepSpec,
    quant: tuple[str, ...],
    min_nodes: tuple[int, int],
    threads: int,
    calibration: tuple[str, ...] = DEFAULT_CALIBRATION,
    max_partitions: tuple[int, ...] | None = None,
    float_layers: tuple[int, ...] | None = None,
    granularity: tuple[str, ...] | None = None,
) -> SweepSpec:
    """``spec`` with its space narrowed to the table's grid (``None``: the spec's own)."""
    space = dataclasses.replace(
        spec.space,
        quant=tuple(QuantMode(q) for q in quant),
        calibration=tuple(Calibration(c) for c in calibration),
        min_nodes_per_partition=IntRange(*min_nodes),
        threads=(threads,),
    )
    if max_partitions is not None:
        space = dataclasses.replace(space, max_delegated_partitions=tuple(max_partitions))
    if float_layers is not None:
        space = dataclasses.replace(space, float_layers=tuple(float_layers))
    if granularity is not None:
        space = dataclasses.replace(space, granularity=tuple(Granularity(g) for g in granularity))
    return dataclasses.replace(spec, space=space)


def ranking_key(runtime: str, granularity: Granularity | None) -> str:
    """The key of one ranking in ``meta.rankings`` (no granularity: dynamic int8 ranks per tensor)."""
    return f"{runtime}|{(granularity or Granularity.PER_TENSOR).value}"


def layers_from(rankings: dict[str, list[str]]) -> LayersFor:
    """``space.layers_for`` from recorded rankings: the top K of the runtime's ranking."""

    def layers_for(
        runtime: str, granularity: Granularity | None, k: int, group_size: int | None = None
    ) -> tuple[str, ...]:
        return tuple(rankings[ranking_key(runtime, granularity)][:k])

    return layers_for


def _spec_of(meta: dict[str, Any]) -> SweepSpec:
    if "spec_inline" in meta:
        return parse_spec(meta["spec_inline"], source=SPEC_SOURCE)
    return load_spec(REPO / meta["spec"])


def table_space(meta: dict[str, Any]) -> DeviceSpace:
    """The device space a table was measured over, rebuilt from its ``meta``."""
    spec = finite_spec(
        _spec_of(meta),
        tuple(meta["quant"]),
        (meta["min_nodes"][0], meta["min_nodes"][1]),
        meta["threads"],
        tuple(meta["calibration"]),
        tuple(meta["max_partitions"]) if "max_partitions" in meta else None,
        tuple(meta["float_layers"]) if "float_layers" in meta else None,
        tuple(meta["granularity"]) if "granularity" in meta else None,
    )
    available = {k: tuple(v) for k, v in meta["available"].items()}
    if "rankings" in meta:
        return device_space(spec, meta["device"], available, meta["cores"], layers_from(meta["rankings"]))
    return device_space(spec, meta["device"], available, meta["cores"])


def _measurement(result: Any) -> dict[str, Any]:
    from nnsweep.core.results import metrics_from_result

    d = result.to_dict()
    return {
        "metrics": metrics_from_result(d),
        "samples_ms": d["samples_ms"],
        "partitions": d["partitions"],
        "loadavg_1m": d["loadavg_1m"],
        "lock_wait_ms": result.timing.lock_wait_ms,
        "artifact_sha256": result.artifact.sha256,
    }


def _shard(configs: list[DeploymentConfig], index: int, count: int) -> list[DeploymentConfig]:
    """The configurations of shard ``index`` of ``count``: whole groups of configurations that
    differ only in partition limits (their artifacts are often byte-identical, measured once),
    dealt out so that the shards get about as many configurations each."""
    groups: dict[tuple[Any, ...], list[DeploymentConfig]] = {}
    for c in configs:
        groups.setdefault((c.runtime, c.backends, c.quant), []).append(c)
    sizes = [0] * count
    mine: list[DeploymentConfig] = []
    for group in groups.values():
        k = sizes.index(min(sizes))
        sizes[k] += len(group)
        if k == index:
            mine.extend(group)
    return mine


def _checkpoint(path: Path) -> dict[str, Any]:
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {"configs": [], "measurements": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--space",
        choices=("quickstart", *SPACES),
        default="quickstart",
        help="quickstart: --spec's space (the threads1/2 tables); outlier: OUTLIER_SPEC (mixed precision); "
        "heldout: HELDOUT_SPEC (the same space on the held-out model); hybrid: HYBRID_SPEC (on the second); "
        "resnet: RESNET_SPEC (on the third); tcn: TCN_SPEC (on the fourth); se: SE_SPEC (on the fifth)",
    )
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    parser.add_argument(
        "--threads",
        type=int,
        action="append",
        help="one table per thread count (default: 1 and 2; a named space: 1)",
    )
    parser.add_argument("--quant", action="append", help=f"quantization modes (default: {', '.join(DEFAULT_QUANT)})")
    parser.add_argument(
        "--min-nodes",
        type=int,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="default: 1 3 (a named space: its spec's)",
    )
    parser.add_argument("--max-partitions", type=int, nargs="+", help="max_delegated_partitions (default: the spec's)")
    parser.add_argument("--float-layers", type=int, nargs="+", help="float_layers counts (default: the spec's)")
    parser.add_argument("--granularity", nargs="+", help="int8 weight granularities (default: the spec's)")
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "nnsweep-search-table")
    parser.add_argument("--out-dir", type=Path, default=REPO / "benchmarks" / "data")
    parser.add_argument("--limit", type=int, default=0, help="measure only the first N configurations (a dry run)")
    parser.add_argument(
        "--shard",
        type=int,
        nargs=2,
        default=(0, 1),
        metavar=("K", "N"),
        help="measure only shard K of N (run N processes, then --merge N)",
    )
    parser.add_argument("--merge", type=int, default=0, metavar="N", help="combine the N shards' files into the tables")
    args = parser.parse_args()
    inline = SPACES.get(args.space)  # None: the quickstart space, from --spec
    threads_list: list[int] = args.threads or ([1] if inline else [1, 2])
    quant = tuple(args.quant or (inline["space"]["quant"] if inline else DEFAULT_QUANT))
    if args.min_nodes is None:
        args.min_nodes = (
            (inline["space"]["min_nodes_per_partition"]["low"], inline["space"]["min_nodes_per_partition"]["high"])
            if inline
            else DEFAULT_MIN_NODES
        )
    prefix = f"search_table_{args.space}" if inline else "search_table"
    if args.merge:
        _merge(args.out_dir, threads_list, args.merge, prefix)
        return

    from nnsweep.agents._probe import probe
    from nnsweep.artifacts import deploy
    from nnsweep.artifacts.cache import ArtifactCache
    from nnsweep.bench import MeasureSettings, measure_in_subprocess
    from nnsweep.bench._warm import WarmWorker
    from nnsweep.core.errors import TrialError
    from nnsweep.models import ModelSnapshot, load_model

    spec = parse_spec(inline, source=SPEC_SOURCE) if inline else load_spec(args.spec)
    caps = probe("host")
    cache = ArtifactCache(args.cache_dir)
    bundle = load_model(spec.model, cache_dir=cache.models_dir)
    snapshot = ModelSnapshot.of(bundle)
    m = spec.measure
    settings = MeasureSettings(m.warmup, m.iters, m.min_duration_s, m.timeout_s)
    wanted = {rt: caps.runtimes[rt] for rt in spec.space.runtimes if rt in caps.runtimes}
    mp = tuple(args.max_partitions) if args.max_partitions else None
    fl = tuple(args.float_layers) if args.float_layers else None
    gr = tuple(args.granularity) if args.granularity else None

    def narrowed(t: int) -> SweepSpec:
        return finite_spec(spec, quant, args.min_nodes, t, DEFAULT_CALIBRATION, mp, fl, gr)

    # The layers each float_layers count keeps float: the runtime's own ranking, as a sweep
    # names them (nnsweep.sweep.host.HostSide.float_layers), measured once into the cache.
    rankings: dict[str, list[str]] = {}
    ranking_s = 0.0
    for rt, c in device_space(narrowed(threads_list[0]), "host", wanted, caps.cores).choices.items():
        if c.float_layers == (0,):
            continue
        for g in c.granularities:
            from nnsweep.sensitivity.ranking import ranking

            t0 = time.monotonic()
            report, hit = ranking(bundle, rt, g, cache.root)
            ranking_s += time.monotonic() - t0
            rankings[ranking_key(rt, g)] = list(report.ranked())
            print(f"ranking {rt} {g.value} ({'cached' if hit else 'measured'}): {rankings[ranking_key(rt, g)][:3]}")
    layers_for = layers_from(rankings)
    spaces = {t: device_space(narrowed(t), "host", wanted, caps.cores, layers_for) for t in threads_list}
    all_configs = enumerate_configs(spaces[threads_list[0]])
    configs = _shard(all_configs, *args.shard)
    if args.limit:
        configs = configs[: args.limit]
    k, n = args.shard
    args.out_dir.mkdir(parents=True, exist_ok=True)
    paths = {t: args.out_dir / f"{prefix}_threads{t}.shard{k}of{n}.json" for t in threads_list}
    state = {t: _checkpoint(paths[t]) for t in threads_list}
    done = {row["digest"] for row in state[threads_list[0]]["configs"]}
    print(
        f"{len(all_configs)} configurations, shard {k}/{n}: {len(configs)} ({len(done)} done before) "
        f"x threads {threads_list}; load {os.getloadavg()}",
        file=sys.stderr,
    )

    workers: dict[str, WarmWorker] = {}  # one per runtime, as a sweep's device agent keeps them
    started = time.monotonic()
    convert_s = measure_s = 0.0
    # a resumed run adds its times to the earlier runs' (each run's own in meta.runs)
    before = state[threads_list[0]].get("meta", {})
    earlier = {k: before.get(k, 0.0) for k in ("elapsed_s", "convert_s", "measure_s", "ranking_s")}
    runs = list(before.get("runs", [])) or (
        [{k: before[k] for k in ("elapsed_s", "convert_s", "measure_s", "loadavg_at_end", "measured_at")}]
        if "elapsed_s" in before
        else []
    )
    for i, config in enumerate(configs):
        if config.digest() in done:
            continue
        t0 = time.monotonic()
        try:
            artifact, hit = deploy.convert(bundle, config, cache)
            error = None
        except TrialError as exc:
            artifact, hit, error = None, False, f"{type(exc).__name__}: {exc}"
        convert_s += time.monotonic() - t0
        for t in threads_list:
            cfg = dataclasses.replace(config, threads=t)
            row: dict[str, Any] = {"config": cfg.to_dict(), "digest": cfg.digest()}
            measured = state[t]["measurements"]
            if artifact is None:
                row["error"] = error
                state[t]["configs"].append(row)
                continue
            run = dataclasses.replace(artifact, config=cfg)  # the same bytes, run with t threads
            key = "|".join([artifact.sha256, cfg.runtime, ">".join(cfg.backends), str(t)])
            row.update(execution_key=key, convert_s=artifact.convert_s, cache_hit=hit)
            if key not in measured:
                t1 = time.monotonic()
                try:
                    timing, outputs = measure_in_subprocess(
                        runtime=cfg.runtime,
                        artifact=run.path,
                        io=run.io,
                        threads=t,
                        backends=cfg.backends,
                        inputs=bundle.dataset.evaluation.inputs,
                        settings=settings,
                        worker=workers.setdefault(cfg.runtime, WarmWorker(cfg.runtime)),
                    )
                    result = deploy.assemble(snapshot, run, timing, outputs, cache_hit=hit)
                    measured[key] = _measurement(result)
                except TrialError as exc:
                    measured[key] = {"error": f"{type(exc).__name__}: {exc}"}
                measure_s += time.monotonic() - t1
            state[t]["configs"].append(row)
        for t in threads_list:
            meta = _meta(args, spec, caps, wanted, quant, settings, t)
            if inline:
                meta.update(spec_inline=inline, space=args.space, rankings=rankings, **_space_meta(spaces[t]))
            mine = {
                "elapsed_s": round(time.monotonic() - started, 1),
                "convert_s": round(convert_s, 1),
                "measure_s": round(measure_s, 1),
                "ranking_s": round(ranking_s, 1),
                "configs": len(configs) - len(done),
                "loadavg_at_end": list(os.getloadavg()),
                "measured_at": meta["measured_at"],
            }
            meta.update({k: round(earlier[k] + mine[k], 1) for k in earlier})
            meta.update(loadavg_at_end=mine["loadavg_at_end"], runs=[*runs, mine])
            state[t]["meta"] = meta
            _write(paths[t], state[t])
        first = state[threads_list[0]]
        m = first["measurements"].get(first["configs"][-1].get("execution_key", ""), {})
        print(
            f"[{i + 1}/{len(configs)}] {time.monotonic() - started:6.0f}s {config.digest()[:8]} "
            f"{config.runtime} {'>'.join(config.backends)} {config.quant.mode.value} "
            f"{config.quant.granularity} {config.quant.calibration} float_layers={len(config.quant.float_layers)} "
            f"{config.partitions} "
            f"p50={m.get('metrics', {}).get('latency_p50_ms')} acc={m.get('metrics', {}).get('accuracy')} "
            f"{error or ''}",
            file=sys.stderr,
            flush=True,
        )
    for worker in workers.values():
        worker.close()
    print(f"shard {k}/{n} elapsed {time.monotonic() - started:.0f} s", file=sys.stderr)
    if n == 1:
        _merge(args.out_dir, threads_list, 1, prefix)


def _space_meta(space: DeviceSpace) -> dict[str, Any]:
    """What :func:`table_space` needs beyond the spec to rebuild a named space's narrowed grid."""
    first = next(iter(space.choices.values()))
    return {
        "max_partitions": list(space.choices["executorch"].max_partitions),
        "float_layers": list(first.float_layers),
        "granularity": [g.value for g in first.granularities],
    }


def _meta(
    args: Any, spec: SweepSpec, caps: Any, wanted: dict[str, Any], quant: tuple[str, ...], settings: Any, t: int
) -> dict[str, Any]:
    inline = SPACES.get(args.space)
    return {
        "spec": f"{args.space.upper()}_SPEC" if inline else str(args.spec.resolve().relative_to(REPO)),
        "model": inline["model"] if inline else spec.model,  # as written: a file model's path stays relative
        "device": "host",
        "threads": t,
        "quant": list(quant),
        "min_nodes": list(args.min_nodes),
        "calibration": list(DEFAULT_CALIBRATION),
        "available": {k: list(v) for k, v in wanted.items()},
        "cores": caps.cores,
        "objectives": {o.metric: o.direction for o in spec.objectives},
        "max_accuracy_drop": spec.max_accuracy_drop,
        "measure": dataclasses.asdict(settings),
        "machine": {"cpu": caps.cpu, "python": platform.python_version(), "arch": platform.machine()},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def _merge(out_dir: Path, threads_list: list[int], n: int, prefix: str = "search_table") -> None:
    """One table per thread count from the shards' files; each shard's time and load kept in ``meta.shards``."""
    for t in threads_list:
        shards = [json.loads((out_dir / f"{prefix}_threads{t}.shard{k}of{n}.json").read_text()) for k in range(n)]
        meta = {k: v for k, v in shards[0]["meta"].items() if k not in ("elapsed_s", "convert_s", "measure_s")}
        meta["shards"] = [
            {k: s["meta"][k] for k in ("elapsed_s", "convert_s", "measure_s", "loadavg_at_end", "measured_at")}
            for s in shards
        ]
        rows = [row for s in shards for row in s["configs"]]
        measurements: dict[str, Any] = {}
        for s in shards:
            for key, m in s["measurements"].items():
                measurements.setdefault(key, m)  # equal bytes measured in two shards: keep one
        out = out_dir / f"{prefix}_threads{t}.json"
        _write(out, {"meta": meta, "configs": rows, "measurements": measurements})
        print(f"wrote {out}: {len(rows)} configurations, {len(measurements)} measurements", file=sys.stderr)


if __name__ == "__main__":
    main()
