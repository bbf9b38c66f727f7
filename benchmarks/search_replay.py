"""Replay search strategies offline against a measured table (``benchmarks/search_table.py``).

Every strategy proposes real configurations of the table's device space (Optuna
samplers through :func:`nnsweep.sweep.space.suggest`, as a sweep does) and is told the
table's measured values, with the accuracy-drop constraint set by
``trial.set_constraint`` as the coordinator sets it. The budget counts
**measurements**: a proposal equal to a configuration already measured (same
digest) or whose artifact is byte-identical to one measured, run the same way, is
told the known values without counting, and the study is asked again, up to
``--repeat-cap`` proposals in a row; past the cap the repeat counts as a trial
(budget spent on a reuse). Random search draws configurations without replacement
under the same rule.

Per strategy and seed it records the trials (measurements) until

* the best feasible configuration is measured: the fastest (``latency_p50_ms``)
  configuration whose accuracy is within ``max_accuracy_drop`` of the fp32 baseline,
  ties broken by accuracy (what ``nnsweep best`` picks), and
* the measured feasible configurations reach 99 % of the hypervolume of the table's
  true feasible Pareto front (accuracy max, latency min; the reference point's
  accuracy is 10 % of the feasible span below the worst feasible accuracy, its latency
  the fp32 baseline's: a deployment slower than the baseline is worth nothing. With
  the slowest feasible latency instead, a table holding a 30 ms portable-kernel
  configuration made every sub-millisecond point 99 % of the front),

and prints the median and p90 over seeds and the ratio to random search. Each run also
counts **seconds** (``Run.best_s``, ``Run.hv_s``): the table's conversion seconds, a stage
already converted in the run free, plus its measuring seconds (``benchmarks/cost_replay.py``
reports them).

Usage:
    .venv/bin/python benchmarks/search_replay.py benchmarks/data/search_table_threads1.json --seeds 20
    .venv/bin/python benchmarks/search_replay.py benchmarks/data/search_table_threads2.json \\
        --warm-start benchmarks/data/search_table_threads1.json --seeds 20
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.spec import Objective
from nnsweep.sweep.space import DeviceSpace, baseline_configs, mode_starts, params_for, suggest, untried

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost_model import CostConfig, CostModel, stage_of

if TYPE_CHECKING:
    import optuna

Point = tuple[float, float]  # (accuracy, latency): maximise the first, minimise the second
FEASIBLE_TOL = 1e-12  # as the coordinator's feasibility test
OBJECTIVES = (Objective("accuracy", "maximize"), Objective("latency_p50_ms", "minimize"))


# ---------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Outcome:
    """What measuring one configuration gave: its objective values (None: it failed)
    and the key of its measurement (equal keys: the same bytes run the same way)."""

    values: Point | None
    key: str


@dataclass
class Table:
    """Every configuration of a finite device space with its measured outcome.

    Args:
        space: the device space the configurations come from.
        configs: digest -> configuration.
        outcomes: digest -> outcome.
        baseline_accuracy: the fp32 baseline's accuracy on this device.
        baseline_latency: the fp32 baseline's p50 (the hypervolume's reference latency).
        max_accuracy_drop: the constraint (None: every measured configuration is feasible).
    """

    space: DeviceSpace
    configs: dict[str, DeploymentConfig]
    outcomes: dict[str, Outcome]
    baseline_accuracy: float
    max_accuracy_drop: float | None
    name: str = "table"
    baseline_latency: float | None = None
    convert_s: dict[str, float] = field(default_factory=dict)  # digest -> conversion seconds as built
    measure_s: float = 0.0  # seconds per measurement (the table's measuring seconds / measurements)
    best: Point = field(init=False)
    front: list[Point] = field(init=False)
    reference: Point = field(init=False)
    front_hv: float = field(init=False)

    def __post_init__(self) -> None:
        feasible = [o.values for o in self.outcomes.values() if o.values is not None and self.feasible(o.values)]
        if not feasible:
            raise ValueError(f"{self.name}: no feasible configuration")
        self.best = min(feasible, key=lambda p: (p[1], -p[0]))
        self.front = pareto_front(feasible)
        accs = [p[0] for p in feasible]
        lats = [p[1] for p in feasible]
        span = max(accs) - min(accs)
        # Latency: the fp32 baseline's (a deployment slower than it is worth nothing), or 10 %
        # beyond the slowest feasible one if the baseline is not feasible or is the fastest.
        slowest = 1.1 * max(lats)
        base = self.baseline_latency if self.baseline_latency is not None else slowest
        self.reference = (min(accs) - (0.1 * span if span > 0 else 1e-3), base if base > min(lats) else slowest)
        self.front_hv = hypervolume(self.front, self.reference)
        self._lowering, self._stage = _split_seconds(self.configs, self.convert_s)

    def conversion_seconds(self, digest: str, built: set[str]) -> float:
        """Seconds to convert ``digest`` when the stages in ``built`` are cached (each added to it)."""
        stage = stage_of(self.configs[digest])
        seconds = self._lowering.get(digest, 0.0) + (0.0 if stage in built else self._stage.get(stage, 0.0))
        built.add(stage)
        return seconds

    def feasible(self, values: Point) -> bool:
        if self.max_accuracy_drop is None:
            return True
        return self.constraint(values) <= FEASIBLE_TOL

    def constraint(self, values: Point) -> float:
        """The value the coordinator sets with ``trial.set_constraint`` (<= 0: feasible)."""
        if self.max_accuracy_drop is None:
            return 0.0
        return (self.baseline_accuracy - values[0]) - self.max_accuracy_drop

    def record(self, digest: str, number: int) -> TrialRecord:
        """The configuration's outcome as the coordinator's record of trial ``number``."""
        values = self.outcomes[digest].values
        if values is None:
            return TrialRecord("replay", self.space.device, number, self.configs[digest], TrialStatus.FAILED)
        metrics = {"accuracy": values[0], "latency_p50_ms": values[1]}
        status = TrialStatus.OK
        return TrialRecord(
            "replay", self.space.device, number, self.configs[digest], status, metrics, feasible=self.feasible(values)
        )

    @property
    def measurements(self) -> int:
        """Distinct measurements: what exhausting the space costs."""
        return len({o.key for o in self.outcomes.values()})

    @classmethod
    def load(cls, path: Path) -> Table:
        """A table written by ``benchmarks/search_table.py``."""
        from search_table import table_space  # benchmarks/ is on sys.path when run as a script

        data = json.loads(Path(path).read_text())
        meta = data["meta"]
        space = table_space(meta)
        objectives = list(meta["objectives"].items())
        if [d for _, d in objectives] != ["maximize", "minimize"]:
            raise ValueError(f"{path}: objectives must be (maximize, minimize), got {objectives}")
        configs: dict[str, DeploymentConfig] = {}
        outcomes: dict[str, Outcome] = {}
        convert_s: dict[str, float] = {}
        for row in data["configs"]:
            config = DeploymentConfig.from_dict(row["config"])
            configs[row["digest"]] = config
            convert_s[row["digest"]] = float(row.get("convert_s") or 0.0)
            m = data["measurements"].get(row.get("execution_key", ""), {})
            metrics = m.get("metrics")
            if metrics is None:
                outcomes[row["digest"]] = Outcome(None, "failed:" + row["digest"])
            else:
                values = (metrics[objectives[0][0]], metrics[objectives[1][0]])
                outcomes[row["digest"]] = Outcome(values, row["execution_key"])
        base = baseline_configs(space)[0]
        base_values = outcomes[base.digest()].values
        if base_values is None:
            raise ValueError(f"{path}: the fp32 baseline {base} failed")
        return cls(
            space,
            configs,
            outcomes,
            base_values[0],
            meta["max_accuracy_drop"],
            name=Path(path).stem,
            baseline_latency=base_values[1],
            convert_s=convert_s,
            measure_s=sum(s.get("measure_s", 0.0) for s in meta.get("shards", [])) / max(1, len(data["measurements"])),
        )


def _split_seconds(
    configs: dict[str, DeploymentConfig], convert_s: dict[str, float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Each configuration's lowering seconds and each stage's seconds, from conversion
    seconds as the table was built (stages cached): the first conversion of a stage
    (:func:`cost_model.stage_of`), its group's slowest, paid the stage; the stage's
    seconds are that conversion's excess over the median of the others, its lowering that median."""
    groups: dict[str, list[str]] = {}
    for digest, config in configs.items():
        groups.setdefault(stage_of(config), []).append(digest)
    lowering = dict(convert_s)
    stage: dict[str, float] = {}
    for key, digests in groups.items():
        if len(digests) < 2 or not all(d in convert_s for d in digests):
            continue
        first = max(digests, key=lambda d: convert_s[d])
        median = statistics.median(convert_s[d] for d in digests if d != first)
        stage[key] = convert_s[first] - median
        lowering[first] = median
    return lowering, stage


# ---------------------------------------------------------------------------- fronts
def pareto_front(points: Iterable[Point]) -> list[Point]:
    """The non-dominated (accuracy max, latency min) points, fastest first, without duplicates."""
    front: list[Point] = []
    for acc, lat in sorted(set(points), key=lambda p: (p[1], -p[0])):
        if not front or acc > front[-1][0]:
            front.append((acc, lat))
    return front


def hypervolume(points: Iterable[Point], reference: Point) -> float:
    """The area dominated by ``points`` and bounded by ``reference`` (accuracy max, latency min)."""
    area = 0.0
    prev_acc = reference[0]
    for acc, lat in pareto_front(p for p in points if p[0] > reference[0] and p[1] < reference[1]):
        area += (acc - prev_acc) * (reference[1] - lat)
        prev_acc = acc
    return area


# ---------------------------------------------------------------------------- one run
@dataclass
class Run:
    """One strategy's search with one seed; ``*_at`` count measurements (inf: never)."""

    best_at: float = math.inf
    hv_at: float = math.inf
    near_at: float = math.inf  # a feasible configuration within NEAR of the best's latency
    counted: int = 0
    seconds: float = 0.0  # conversions (cached stages free) and measurements so far
    best_s: float = math.inf  # seconds until the best was measured
    hv_s: float = math.inf  # seconds until 99 % of the front's hypervolume
    skipped: list[str] = field(default_factory=list)  # digests the cost model did not convert
    sampled: int = 0  # proposals the sampler made (not a start, a move or an untried draw)
    picked: int = 0  # proposals the cost model's gain per second picked
    repeats: int = 0
    cap_hits: int = 0
    proposals: int = 0
    measured: list[str] = field(default_factory=list)  # digests that cost a measurement, in order


NEAR = 0.03
"""A configuration this much slower than the table's best counts as reaching it in the
"within 3 %" column: fresh processes measuring one artifact on this machine differ by
about that much (docs/explanation/measurement.md), so a table's best over a configuration that
close is decided by its one sample."""


class _Progress:
    def __init__(self, table: Table, hv_fraction: float) -> None:
        self.table = table
        self.target_hv = hv_fraction * table.front_hv
        self.keys: set[str] = set()
        self.digests: set[str] = set()
        self.points: list[Point] = []
        self.built: set[str] = set()  # stages converted so far
        self.last: tuple[float, float | None] = (0.0, None)  # the last proposal's conversion, measurement
        self.run = Run()

    @property
    def done(self) -> bool:
        return self.run.best_at < math.inf and self.run.hv_at < math.inf

    def is_repeat(self, digest: str) -> bool:
        return digest in self.digests or self.table.outcomes[digest].key in self.keys

    def charge(self, digest: str) -> tuple[float, float | None]:
        """What proposing ``digest`` costs: its conversion (none for a configuration seen
        before) and its measurement (none for a failure or a measurement known)."""
        self.last = (0.0, None)
        if digest in self.digests:
            return self.last
        outcome = self.table.outcomes[digest]
        converting = self.table.conversion_seconds(digest, self.built)
        measuring = None if outcome.values is None or outcome.key in self.keys else self.table.measure_s
        self.run.seconds += converting + (measuring or 0.0)
        self.last = (converting, measuring)
        return self.last

    def observe(self, digest: str, *, counted: bool) -> None:
        outcome = self.table.outcomes[digest]
        self.charge(digest)
        self.digests.add(digest)
        if not counted:
            self.run.repeats += 1
            return
        self.run.counted += 1
        self.run.measured.append(digest)
        if outcome.key in self.keys:
            return
        self.keys.add(outcome.key)
        v = outcome.values
        if v is None or not self.table.feasible(v):
            return
        self.points.append(v)
        n = self.run.counted
        if self.run.near_at == math.inf and v[1] <= self.table.best[1] * (1 + NEAR):
            self.run.near_at = n
        if self.run.best_at == math.inf and v == self.table.best:
            self.run.best_at, self.run.best_s = n, self.run.seconds
        if self.run.hv_at == math.inf and hypervolume(self.points, self.table.reference) >= self.target_hv - 1e-15:
            self.run.hv_at, self.run.hv_s = n, self.run.seconds


def replay_random(
    table: Table,
    seed: int,
    *,
    first: Sequence[DeploymentConfig] = (),
    hv_fraction: float = 0.99,
    moves: bool = False,
) -> Run:
    """Random search without replacement over the table's configurations; configurations
    whose measurement is already known (byte-identical artifacts) are free. ``first``
    (e.g. the baselines and mode starts a sweep enqueues) are measured first, in order.
    ``moves``: after ``first``, the coordinator's move (:func:`nnsweep.sweep.moves.next_move`)
    whenever there is one, a random draw otherwise."""
    from nnsweep.sweep.moves import next_move

    order = sorted(table.outcomes)
    random.Random(seed).shuffle(order)
    queue = [c.digest() for c in first]
    progress = _Progress(table, hv_fraction)
    records: list[TrialRecord] = []
    while not progress.done:
        move = None
        if moves and not queue:
            move = next_move(records, OBJECTIVES, table.space, lambda c: c.digest() in progress.digests)
        if move is not None:
            digest = move[0].digest()
        elif queue:
            digest = queue.pop(0)
        else:
            order = [d for d in order if d not in progress.digests]
            if not order:
                break
            digest = order.pop(0)
        progress.run.proposals += 1
        progress.observe(digest, counted=not progress.is_repeat(digest))
        records.append(table.record(digest, len(records)))
    return progress.run


def replay_study(
    table: Table,
    sampler: optuna.samplers.BaseSampler,
    *,
    enqueue: Sequence[DeploymentConfig] = (),
    hv_fraction: float = 0.99,
    repeat_cap: int = 20,
    max_trials: int | None = None,
    constraints: bool = True,
    divert_after: int | None = None,
    seed: int = 0,
    moves: bool = False,
    cost: CostConfig | None = None,
    pool: bool = True,
    gate_moves: bool = False,
) -> Run:
    """One Optuna study against ``table``, as the coordinator runs it (see the module docstring).

    Args:
        sampler: the study's sampler.
        enqueue: configurations enqueued before anything is sampled (the baselines).
        repeat_cap: repeats told in a row before one counts.
        max_trials: stop after this many counted trials (default: the table's distinct
            measurements, what random search needs at worst).
        constraints: set the accuracy-drop constraint on each trial (else the sampler
            sees the objectives alone; feasibility is still judged by the table).
        divert_after: the coordinator's rule (``Scheduler.divert_after``): after this
            many repeats in a row, an untried configuration drawn by
            :func:`nnsweep.sweep.space.untried` is enqueued as the next trial (None: never).
        seed: seeds the untried draws.
        moves: when no trial is queued, the coordinator's move
            (:func:`nnsweep.sweep.moves.next_move`: a repair, or a neighbour of the
            best) is enqueued before the sampler is asked, as the coordinator does.
        cost: cost-aware proposals (benchmarks/cost_model.py): a sampler's proposal
            predicted dominated is not converted (told pruned, up to ``skip_cap`` in a
            row), and (``pool``) when there is no move, the untried candidate with the
            highest expected gain per second is enqueued before the sampler is asked.
        gate_moves: with ``cost``, a refinement (not a repair) predicted dominated is
            skipped too, and the coordinator's next move is taken instead.
    """
    import optuna
    from optuna.trial import TrialState

    from nnsweep.sweep.moves import next_move

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    for config in enqueue:
        study.enqueue_trial(params_for(config, table.space), skip_if_exists=False)
    limit = max_trials if max_trials is not None else table.measurements
    progress = _Progress(table, hv_fraction)
    in_a_row = 0
    rng = random.Random(seed)
    records: list[TrialRecord] = []
    model = CostModel(cost) if cost is not None else None
    floor = table.baseline_accuracy - (table.max_accuracy_drop or 0.0)
    reference = (floor - 1e-9, table.baseline_latency or math.inf)
    skips = 0
    gated: set[str] = set()  # moves the cost model skipped
    while not progress.done and progress.run.counted < limit:
        if divert_after is not None and in_a_row >= divert_after:
            config = untried(table.space, lambda c: c.digest() in progress.digests, rng)
            if config is not None:
                study.enqueue_trial(params_for(config, table.space), skip_if_exists=False)
        elif moves and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            move = next_move(
                records, OBJECTIVES, table.space, lambda c: c.digest() in progress.digests or c.digest() in gated
            )
            while model is not None and gate_moves and move is not None and _skip_move(move, model, progress):
                progress.run.skipped.append(move[0].digest())
                gated.add(move[0].digest())
                move = next_move(
                    records, OBJECTIVES, table.space, lambda c: c.digest() in progress.digests or c.digest() in gated
                )
            if move is not None:
                study.enqueue_trial(params_for(move[0], table.space), skip_if_exists=False)
            elif model is not None and pool:
                picked = model.best(_pool(table, progress, rng, model.config.pool), reference, floor)
                if picked is not None:
                    progress.run.picked += 1
                    study.enqueue_trial(params_for(picked, table.space), skip_if_exists=False)
        sampled = not study.get_trials(deepcopy=False, states=(TrialState.WAITING,))  # else ask takes the queued
        trial = study.ask()
        config = suggest(trial, table.space)
        digest = config.digest()
        progress.run.proposals += 1
        progress.run.sampled += sampled
        skippable = model is not None and sampled and skips < model.config.skip_cap
        if skippable and model is not None and not progress.is_repeat(digest) and model.dominated(config):
            skips += 1  # not converted: told pruned, and the study is asked again
            progress.run.skipped.append(digest)
            study.tell(trial, state=TrialState.PRUNED)
            continue
        skips = 0
        repeat = progress.is_repeat(digest)
        if repeat and in_a_row < repeat_cap:
            in_a_row += 1
            progress.observe(digest, counted=False)
        else:
            if repeat:
                progress.run.cap_hits += 1
            in_a_row = 0
            progress.observe(digest, counted=True)
        values = table.outcomes[digest].values
        records.append(table.record(digest, trial.number))
        converting, measuring = progress.last
        if model is not None and converting:
            model.converted(config, converting, measuring=measuring)
        if model is not None and values is not None and measuring is not None:
            model.measured(config, values, feasible=table.feasible(values))
        if values is None:
            study.tell(trial, state=TrialState.FAIL)
            continue
        if constraints:
            trial.set_constraint("accuracy_drop", table.constraint(values))
        study.tell(trial, list(values))
    return progress.run


def _skip_move(move: tuple[DeploymentConfig, Any], model: CostModel, progress: _Progress) -> bool:
    """Whether the cost model skips this move: a refinement (a repair is never skipped)
    not measured before, predicted dominated."""
    config, role = move
    return str(role) != "repair" and not progress.is_repeat(config.digest()) and model.dominated(config)


def _pool(table: Table, progress: _Progress, rng: random.Random, size: int) -> list[DeploymentConfig]:
    """Up to ``size`` distinct untried configurations, drawn at random."""
    picked: dict[str, DeploymentConfig] = {}
    for _ in range(size):
        config = untried(table.space, lambda c: c.digest() in progress.digests or c.digest() in picked, rng)
        if config is None:
            break
        picked[config.digest()] = config
    return list(picked.values())


# ---------------------------------------------------------------------------- strategies
Strategy = Callable[[Table, int], Run]


def tpe(**kwargs: Any) -> Callable[[int], optuna.samplers.BaseSampler]:
    def make(seed: int) -> optuna.samplers.BaseSampler:
        import optuna

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, **kwargs)

    return make


def study_strategy(
    make_sampler: Callable[[int], optuna.samplers.BaseSampler],
    *,
    baselines: str = "enqueue",
    warm: Sequence[DeploymentConfig] = (),
    constraints: bool = True,
    divert_after: int | None = None,
) -> Strategy:
    """A strategy: a study with ``make_sampler(seed)``, the baselines enqueued first
    (``"enqueue"``), only the fp32 baseline (``"fp32"``) or none (``"none"``), then ``warm``."""

    def run(table: Table, seed: int) -> Run:
        base = baseline_configs(table.space)
        first = {"enqueue": base, "fp32": base[:1], "none": [], "starts": [*base, *mode_starts(table.space)]}[baselines]
        return replay_study(
            table,
            make_sampler(seed),
            enqueue=[*first, *warm],
            constraints=constraints,
            divert_after=divert_after,
            seed=seed,
        )

    return run


def nnsweep_today(seed: int) -> optuna.samplers.BaseSampler:
    """The sampler ``nnsweep.sweep.loop.open_study`` builds today (seed aside)."""
    return tpe(n_startup_trials=8, multivariate=True, group=True)(seed)


DIVERT_AFTER = 3  # the coordinator's rule: nnsweep.sweep.scheduler.Scheduler.divert_after


def nnsweep_strategy(
    *,
    starts: bool = True,
    warm: Sequence[DeploymentConfig] = (),
    moves: bool = True,
    cost: CostConfig | None = None,
    pool: bool = True,
    gate_moves: bool = False,
) -> Strategy:
    """What a sweep does: the baselines, then ``warm`` (another device's front), then
    (``starts``) the mode starts (:func:`nnsweep.sweep.space.mode_starts`); ``make_sampler``;
    an untried configuration after ``DIVERT_AFTER`` repeats in a row."""
    from nnsweep.sweep.sampler import make_sampler

    def run(table: Table, seed: int) -> Run:
        first = [*baseline_configs(table.space), *warm, *(mode_starts(table.space) if starts else [])]
        return replay_study(
            table,
            make_sampler(seed),
            enqueue=first,
            divert_after=DIVERT_AFTER,
            seed=seed,
            moves=moves,
            cost=cost,
            pool=pool,
            gate_moves=gate_moves,
        )

    return run


def random_with_starts(table: Table, seed: int, *, moves: bool = False) -> Run:
    """Random search without replacement after the same starts as nnsweep (baselines, mode
    starts); ``moves``: and with the same moves (what the sampler adds beyond them)."""
    return replay_random(table, seed, first=[*baseline_configs(table.space), *mode_starts(table.space)], moves=moves)


SAME_STARTS = "random (no replacement) after nnsweep's starts"


def strategies() -> dict[str, Strategy]:
    """The strategies compared by default (name -> strategy)."""
    import optuna

    return {
        "random (no replacement)": lambda table, seed: replay_random(table, seed),
        "nnsweep: baselines, mode starts, moves, make_sampler, divert after 3": nnsweep_strategy(),
        SAME_STARTS: random_with_starts,
        "random (no replacement) after nnsweep's starts, with its moves": functools.partial(
            random_with_starts, moves=True
        ),
        "nnsweep without moves (starts, make_sampler, divert after 3)": nnsweep_strategy(moves=False),
        "Optuna RandomSampler after nnsweep's starts, divert after 3": study_strategy(
            lambda s: optuna.samplers.RandomSampler(seed=s), baselines="starts", divert_after=DIVERT_AFTER
        ),
        "nnsweep without mode starts": nnsweep_strategy(starts=False),
        "TPE independent, 10 startup, baselines": study_strategy(tpe()),
        "NSGA-II, population 10, baselines": study_strategy(
            lambda s: optuna.samplers.NSGAIISampler(seed=s, population_size=10)
        ),
        "Optuna RandomSampler, baselines": study_strategy(lambda s: optuna.samplers.RandomSampler(seed=s)),
    }


def candidates() -> dict[str, Strategy]:
    """The settings tried when tuning the search (``--tune``): startup trials,
    multivariate/group, constraint handling, the enqueued defaults (baselines only, the
    fp32 baseline only, the mode starts), a random draw or mutation after a repeat
    (:func:`nnsweep.sweep.sampler.repeat_escape`), the coordinator's untried draw after 3
    repeats, and partition limits sampled only for a combination already tried
    (:func:`refinements_last`)."""
    import optuna

    mv_group_3 = tpe(n_startup_trials=3, multivariate=True, group=True)
    random_sampler = lambda s: optuna.samplers.RandomSampler(seed=s)  # noqa: E731
    divert = DIVERT_AFTER
    return {
        "random (no replacement)": lambda table, seed: replay_random(table, seed),
        "nnsweep: baselines, mode starts, make_sampler, divert after 3": nnsweep_strategy(),
        "nnsweep without mode starts (make_sampler, divert after 3)": nnsweep_strategy(starts=False),
        "mode starts + random sampler, divert after 3": study_strategy(
            random_sampler, baselines="starts", divert_after=divert
        ),
        "refinements last (mv+group TPE), divert after 3": study_strategy(
            refinements_last(nnsweep_today), divert_after=divert
        ),
        "refinements last (mv+group TPE) + random after a repeat, divert after 3": study_strategy(
            escape(refinements_last(nnsweep_today)), divert_after=divert
        ),
        "refinements last (independent TPE, 3 startup), divert after 3": study_strategy(
            refinements_last(tpe(n_startup_trials=3)), divert_after=divert
        ),
        "refinements last (random sampler), divert after 3": study_strategy(
            refinements_last(random_sampler), divert_after=divert
        ),
        "today (mv+group, 8 startup, baselines)": study_strategy(nnsweep_today),
        "today + random after a repeat": study_strategy(escape(nnsweep_today)),
        "today + random after a repeat, fp32 baseline only": study_strategy(escape(nnsweep_today), baselines="fp32"),
        "today + random after a repeat, no constraint": study_strategy(escape(nnsweep_today), constraints=False),
        "mv+group, 3 startup + random after a repeat": study_strategy(escape(mv_group_3)),
        "mv (no group), 3 startup + random after a repeat": study_strategy(
            escape(tpe(n_startup_trials=3, multivariate=True))
        ),
        "independent, 3 startup + random after a repeat": study_strategy(escape(tpe(n_startup_trials=3))),
        "independent, 10 startup + random after a repeat": study_strategy(escape(tpe())),
        "today + mutate a repeat (keep 0.5)": study_strategy(escape(nnsweep_today, 0.5)),
        "today + mutate a repeat (keep 0.7)": study_strategy(escape(nnsweep_today, 0.7)),
        "mv+group, 3 startup + mutate a repeat (keep 0.7)": study_strategy(escape(mv_group_3, 0.7)),
        "independent, 3 startup + mutate a repeat (keep 0.7)": study_strategy(escape(tpe(n_startup_trials=3), 0.7)),
        "NSGA-II, population 10": study_strategy(lambda s: optuna.samplers.NSGAIISampler(seed=s, population_size=10)),
        "Optuna RandomSampler": study_strategy(random_sampler),
    }


def escape(
    make: Callable[[int], optuna.samplers.BaseSampler], keep: float = 0.0
) -> Callable[[int], optuna.samplers.BaseSampler]:
    """``make``'s sampler wrapped by :func:`nnsweep.sweep.sampler.repeat_escape`."""
    from nnsweep.sweep.sampler import repeat_escape

    return lambda seed: repeat_escape(make(seed), seed, keep)


REFINEMENTS = {".max_delegated_partitions": 0, ".min_nodes_per_partition": 1}  # suffix -> "no limit"


def _refinement(name: str) -> int | None:
    """The no-limit value of a partition-limit parameter (None: not one)."""
    return next((v for suffix, v in REFINEMENTS.items() if name.endswith(suffix)), None)


def refinements_last(
    make: Callable[[int], optuna.samplers.BaseSampler],
) -> Callable[[int], optuna.samplers.BaseSampler]:
    """``make``'s sampler, except that partition limits refine a combination already tried.

    The partition limits (``*.max_delegated_partitions``, ``*.min_nodes_per_partition``)
    change nothing on most models (their artifacts are byte-identical to the unlimited
    one) and refine the rest. So a trial whose other parameters (runtime, order,
    quantization, threads) were never tried gets no limits; once that combination has
    a trial, the wrapped sampler samples the limits. Coarse first, then fine: the search spends
    its first trials across runtimes and quantizations instead of partition limits.
    """
    return lambda seed: _refine_class()(make(seed))


@functools.cache
def _refine_class() -> type[Any]:
    from optuna.samplers import BaseSampler
    from optuna.trial import TrialState

    seen_states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.RUNNING)

    def coarse(params: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in params.items() if _refinement(k) is None}

    class RefinementsLast(BaseSampler):  # type: ignore[misc]
        def __init__(self, inner: BaseSampler) -> None:
            self._inner = inner

        def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
            space = self._inner.infer_relative_search_space(study, trial)
            return {k: v for k, v in space.items() if _refinement(k) is None}

        def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
            params: dict[str, Any] = self._inner.sample_relative(study, trial, search_space)
            return params

        def sample_independent(self, study: optuna.Study, trial: Any, name: str, distribution: Any) -> Any:
            unlimited = _refinement(name)
            if unlimited is not None and distribution._contains(distribution.to_internal_repr(unlimited)):
                mine = coarse(trial.params)
                others = study.get_trials(deepcopy=False, states=seen_states)
                if not any(coarse(t.params) == mine for t in others if t.number != trial.number):
                    return unlimited
            return self._inner.sample_independent(study, trial, name, distribution)

        def before_trial(self, study: optuna.Study, trial: Any) -> None:
            self._inner.before_trial(study, trial)

        def after_trial(
            self, study: optuna.Study, trial: Any, state: TrialState, values: Sequence[float] | None
        ) -> None:
            self._inner.after_trial(study, trial, state, values)

        def reseed_rng(self) -> None:
            self._inner.reseed_rng()

    return RefinementsLast


# ---------------------------------------------------------------------------- summary
def p90(values: Sequence[float]) -> float:
    """Nearest-rank 90th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _fmt(x: float) -> str:
    if x == math.inf:
        return "never"
    return f"{x:g}"


def best_described(table: Table) -> list[tuple[str, str]]:
    """Each configuration that measured the table's best, and whether it is a default deployment:
    a baseline (:func:`nnsweep.sweep.space.baseline_configs`), a mode start
    (:func:`nnsweep.sweep.space.mode_starts`) or neither (found only by searching)."""
    base = {c.digest() for c in baseline_configs(table.space)}
    starts = {c.digest() for c in mode_starts(table.space)}
    starts_keys = {table.outcomes[d].key: d for d in base | starts if d in table.outcomes}
    out = []
    for digest, outcome in sorted(table.outcomes.items()):
        if outcome.values != table.best:
            continue
        c = table.configs[digest]
        kind = (
            "a baseline"
            if digest in base
            else "a mode start"
            if digest in starts
            else "same bytes as a start"
            if outcome.key in starts_keys
            else "not a default deployment"
        )
        layers = ",".join(c.quant.float_layers) or "-"
        label = (
            f"{c.runtime} {'>'.join(c.backends) or '-'} {c.quant.mode.value} {c.quant.granularity or '-'} "
            f"float_layers={layers} max_delegated_partitions={c.partitions.max_delegated_partitions} "
            f"min_nodes={c.partitions.min_nodes_per_partition}"
        )
        out.append((label, kind))
    return out


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b not in (0, math.inf) else "-"


@dataclass
class Summary:
    name: str
    runs: list[Run]
    seconds: float

    def stat(self, attr: str, fn: Callable[[Sequence[float]], float]) -> float:
        return fn([getattr(r, attr) for r in self.runs])


def summarise(
    table: Table,
    results: list[Summary],
    reference: str = "random (no replacement)",
    second: str | None = SAME_STARTS,
) -> str:
    """The results as a Markdown table; ratios are medians over ``reference``'s medians (and,
    when ``second`` is among the results, over ``second``'s: random search given nnsweep's starts)."""
    ref = next((s for s in results if s.name == reference), None)
    ref2 = next((s for s in results if s.name == second), None)
    lines = [
        f"table {table.name}: {len(table.configs)} configurations, {table.measurements} distinct measurements, "
        f"best feasible p50 {table.best[1]:.4f} ms at accuracy {table.best[0]:.4f}, "
        f"front of {len(table.front)} points",
        *(f"  best: {label} ({kind})" for label, kind in best_described(table)),
        "",
        "| strategy | seeds | best: median | best: p90 | 99% HV: median | 99% HV: p90 | within 3 %: median "
        "| ratio vs random (best / HV, medians) | repeats told per run (median) | cap hits | s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if ref2 is not None:
        lines[-2] = lines[-2].replace(
            " | repeats", " | ratio vs random after the same starts (best / HV / within 3 %) | repeats"
        )
        lines[-1] += "---|"
    for s in results:
        bm, bp = s.stat("best_at", statistics.median), s.stat("best_at", p90)
        hm, hp = s.stat("hv_at", statistics.median), s.stat("hv_at", p90)
        nm = s.stat("near_at", statistics.median)
        ratio = "-"
        if ref is not None and s is not ref:
            rb, rh = ref.stat("best_at", statistics.median), ref.stat("hv_at", statistics.median)
            ratio = f"{bm / rb:.2f} / {hm / rh:.2f}"
        if ref2 is not None:
            ratio += " | -" if s is ref2 else f" | {_ratio(bm, ref2.stat('best_at', statistics.median))}"
            ratio += "" if s is ref2 else f" / {_ratio(hm, ref2.stat('hv_at', statistics.median))}"
            ratio += "" if s is ref2 else f" / {_ratio(nm, ref2.stat('near_at', statistics.median))}"
        reps = s.stat("repeats", statistics.median)
        caps = sum(r.cap_hits for r in s.runs)
        lines.append(
            f"| {s.name} | {len(s.runs)} | {_fmt(bm)} | {_fmt(bp)} | {_fmt(hm)} | {_fmt(hp)} | {_fmt(nm)} | {ratio} "
            f"| {reps:g} | {caps} | {s.seconds / len(s.runs):.1f} |"
        )
    return "\n".join(lines)


_JOB: tuple[Table, dict[str, Strategy]] | None = None  # what forked workers replay


def _one(task: tuple[str, int]) -> tuple[str, int, Run, float]:
    if _JOB is None:
        raise RuntimeError("evaluate() sets the job before replaying")
    table, named = _JOB
    started = time.monotonic()
    run = named[task[0]](table, task[1])
    return task[0], task[1], run, time.monotonic() - started


def evaluate(table: Table, named: dict[str, Strategy], seeds: Iterable[int], jobs: int = 1) -> list[Summary]:
    """Every strategy with every seed, in ``jobs`` forked processes."""
    import multiprocessing

    global _JOB
    _JOB = (table, named)
    tasks = [(name, seed) for name in named for seed in seeds]
    runs: dict[str, dict[int, Run]] = {name: {} for name in named}
    seconds: dict[str, float] = dict.fromkeys(named, 0.0)
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = list(pool.imap_unordered(_one, tasks))
    else:
        results = [_one(task) for task in tasks]
    for name, seed, run, spent in results:
        runs[name][seed] = run
        seconds[name] += spent
    return [Summary(name, [runs[name][s] for s in sorted(runs[name])], seconds[name]) for name in named]


def warm_configs(source: Table, target: Table) -> list[DeploymentConfig]:
    """``source``'s feasible Pareto configurations (fastest first), as configurations of
    ``target``'s space (same choices, the target's thread count)."""
    import dataclasses

    threads = target.space.threads[0]
    front = set(source.front)
    picked: dict[Point, DeploymentConfig] = {}
    for digest, outcome in sorted(source.outcomes.items()):
        if outcome.values in front and outcome.values not in picked:
            picked[outcome.values] = dataclasses.replace(source.configs[digest], threads=threads)
    return [picked[p] for p in source.front]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--strategy", action="append", help="only these strategies (substring match)")
    parser.add_argument("--tune", action="store_true", help="compare the sampler settings tried when tuning")
    parser.add_argument("--warm-start", type=Path, help="another device's table: replay with its front enqueued")
    parser.add_argument("--jobs", type=int, default=1, help="replay in this many processes")
    parser.add_argument("--json", type=Path, help="also write every run as JSON here")
    args = parser.parse_args()
    table = Table.load(args.table)
    if args.warm_start is not None:
        warm = warm_configs(Table.load(args.warm_start), table)
        named: dict[str, Strategy] = {
            "random (no replacement)": lambda t, s: replay_random(t, s),
            "nnsweep, cold": nnsweep_strategy(),
            f"nnsweep, warm: baselines, {len(warm)} front configs, mode starts": nnsweep_strategy(warm=warm),
            "nnsweep without mode starts, cold": nnsweep_strategy(starts=False),
            f"nnsweep without mode starts, warm: baselines, then {len(warm)} front configs": nnsweep_strategy(
                starts=False, warm=warm
            ),
        }
    else:
        named = candidates() if args.tune else strategies()
    if args.strategy:
        named = {k: v for k, v in named.items() if any(w in k for w in args.strategy)}
    results = evaluate(table, named, range(args.seeds), args.jobs)
    print(summarise(table, results))
    if args.json:
        args.json.write_text(
            json.dumps({s.name: [r.__dict__ for r in s.runs] for s in results}, indent=1, default=str) + "\n"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
