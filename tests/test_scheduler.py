"""The scheduler's rules, each on its own, with a fake executor and a fake clock (milliseconds)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from nnsweep.artifacts.key import conversion_digest
from nnsweep.core.config import DeploymentConfig, PartitionLimits, QuantConfig, QuantMode
from nnsweep.core.results import TrialRecord, TrialStatus
from nnsweep.sweep import outcomes
from nnsweep.sweep.device_state import DeviceState
from nnsweep.sweep.lifecycle import IllegalTransition, Phase, Role, Ticket
from nnsweep.sweep.placement import Action
from nnsweep.sweep.scheduler import Admission, Scheduler, default_depth, reuse_key

HOST = "laptop"


def config(threads: int = 1, mode: QuantMode = QuantMode.FP32, *, artifact: int | None = None) -> DeploymentConfig:
    """A configuration; each thread count is its own artifact too (a partition limit), unless
    ``artifact`` says which (equal ``artifact``: the same conversion at another thread count)."""
    limits = PartitionLimits(min_nodes_per_partition=threads if artifact is None else artifact)
    return DeploymentConfig("executorch", ("xnnpack", "portable"), QuantConfig(mode), limits, threads=threads)


def record(ticket: Ticket, status: TrialStatus = TrialStatus.OK, **metrics: float) -> TrialRecord:
    return TrialRecord("s", ticket.device, ticket.number, ticket.config, status, metrics=metrics or {"accuracy": 0.9})


class FakeExecutor:
    """Stands at the executor seam: remembers what was started; the test decides when it ends."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.started: list[Action] = []
        self.numbers: Iterator[int] = iter(range(1000))

    def step(self, now: float) -> list[Action]:
        actions = self.scheduler.placement.plan(now)
        self.started.extend(actions)
        return actions

    def propose(self, device: str, cfg: DeploymentConfig, now: float, role: Role = Role.SEARCH) -> Ticket:
        ticket = Ticket(device, next(self.numbers), cfg, reuse_key("model", cfg), role)
        self.scheduler.admit(ticket, now)
        return ticket

    def convert_done(self, ticket: Ticket, now: float, sha: str = "") -> None:
        for t in self.scheduler.placement.converting(conversion_digest(ticket.config)):
            self.scheduler.converted(t, sha or ticket.config.digest(), now)

    def told(self, ticket: Ticket, rec: TrialRecord, now: float) -> None:
        settlement = self.scheduler.settle(ticket, rec, now)
        for t in settlement.tell:
            self.scheduler.told(t, t.outcome or rec, now)


def scheduler(*devices: tuple[str, str], slots: int = 1, budget: int = 10) -> tuple[Scheduler, FakeExecutor]:
    s = Scheduler(HOST, slots, lost_timeout_s=60.0, revive_every_s=5.0)
    for name, machine in devices:
        s.add(DeviceState(name, machine, budget))
    return s, FakeExecutor(s)


def kinds(actions: list[Action]) -> list[tuple[str, str, int]]:
    return [(a.kind, a.ticket.device, a.ticket.number) for a in actions]


def test_lifecycle_rejects_illegal_moves_and_times_each_phase() -> None:
    t = Ticket("d", 0, config(), "k")
    t.start(0.0)
    t.move(Phase.CONVERTING, 1.0)
    t.move(Phase.READY, 4.0)
    with pytest.raises(IllegalTransition):
        t.move(Phase.CONVERTING, 5.0)
    t.move(Phase.MEASURING, 6.0)
    t.move(Phase.TOLD, 9.0)
    assert t.phase.terminal
    assert t.durations() == {"proposed": 1.0, "converting": 3.0, "ready": 2.0, "measuring": 3.0}
    live = Ticket("d", 1, config(), "k")
    live.start(0.0)
    live.move(Phase.READY, 2.0)
    live.move(Phase.MEASURING, 3.0)  # judged while still measuring: the phase counts up to now
    assert live.durations(now=5.0) == {"proposed": 2.0, "ready": 1.0, "measuring": 2.0}
    assert live.durations() == {"proposed": 2.0, "ready": 1.0}
    with pytest.raises(IllegalTransition):
        t.move(Phase.FAILED, 10.0)


def test_isolation_nothing_runs_beside_a_measurement_on_its_machine() -> None:
    _s, ex = scheduler(("host", HOST), ("board", "rpi"))
    a = ex.propose("host", config(1), 0.0)
    b = ex.propose("host", config(2), 0.0)
    assert kinds(ex.step(0.0)) == [("convert", "host", a.number)]  # one conversion slot
    ex.convert_done(a, 1.0)
    # the host measures a; meanwhile nothing may convert on the host machine
    assert kinds(ex.step(1.0)) == [("measure", "host", a.number)]
    assert ex.step(1.5) == [] and b.phase is Phase.PROPOSED
    # conversions run on the host machine, so the board's next artifact waits too
    c = ex.propose("board", config(3), 1.5)
    assert ex.step(1.6) == [] and c.phase is Phase.PROPOSED
    ex.told(a, record(a), 2.0)
    assert kinds(ex.step(2.0)) == [("convert", "host", b.number)]
    ex.convert_done(b, 3.0)
    assert kinds(ex.step(3.0)) == [("measure", "host", b.number)]


def test_the_coordinator_keeps_quiet_while_its_own_machine_measures_not_a_boards() -> None:
    s, ex = scheduler(("host", HOST), ("board", "rpi"))
    board = ex.propose("board", config(1), 0.0)
    ex.step(0.0)
    ex.convert_done(board, 1.0)
    assert kinds(ex.step(1.0)) == [("measure", "board", board.number)] and not s.placement.quiet()  # a board's time
    host = ex.propose("host", config(2), 1.0)
    ex.step(1.0)
    ex.convert_done(host, 2.0)
    ex.told(board, record(board), 2.0)
    assert kinds(ex.step(2.0)) == [("measure", "host", host.number)]
    assert s.placement.quiet()  # no sampling or tracking writes beside the host's timed runs
    ex.told(host, record(host), 3.0)
    assert not s.placement.quiet()


def test_isolation_nothing_measures_on_a_machine_while_an_agent_there_starts_its_runtimes() -> None:
    s, ex = scheduler(("host", HOST), ("twin", HOST), ("board", "rpi"))
    s.devices["twin"].starting = True  # its warm workers import their runtimes
    r = ex.propose("board", config(2), 0.0)
    assert kinds(ex.step(0.0)) == [("convert", "board", r.number)]  # converting beside a start is fine
    ex.convert_done(r, 1.0)
    a = ex.propose("host", config(1), 1.0)
    # the board is another machine: it measures; the host's artifact converts
    assert kinds(ex.step(1.0)) == [("measure", "board", r.number), ("convert", "host", a.number)]
    ex.convert_done(a, 2.0)
    ex.told(r, record(r), 2.0)
    assert ex.step(2.0) == [] and a.phase is Phase.READY  # the host machine waits for twin's start
    s.devices["twin"].starting = False
    assert kinds(ex.step(3.0)) == [("measure", "host", a.number)]


def test_isolation_a_remote_device_measures_while_the_host_converts() -> None:
    _s, ex = scheduler(("host", HOST), ("board", "rpi"), slots=1)
    board = ex.propose("board", config(1), 0.0)
    ex.step(0.0)
    ex.convert_done(board, 1.0)
    other = ex.propose("board", config(2), 1.0)
    actions = kinds(ex.step(1.0))
    assert ("measure", "board", board.number) in actions and ("convert", "board", other.number) in actions


def test_conversions_spread_over_machines_build_servers_first_never_beside_a_measurement() -> None:
    s = Scheduler(HOST, {HOST: 1, "builder": 1})
    s.add(DeviceState("host", HOST, 10))
    ex = FakeExecutor(s)
    a, b, c = (ex.propose("host", config(t), 0.0) for t in (1, 2, 4))
    started = ex.step(0.0)
    # the build server (no device on it) first, then the host machine's own slot
    assert [(x.kind, x.ticket.number, x.machine) for x in started] == [
        ("convert", a.number, "builder"),
        ("convert", b.number, HOST),
    ]
    assert a.converted_on == "builder" and c.phase is Phase.PROPOSED
    ex.convert_done(a, 1.0)
    # the builder is free again and takes c; a may not be measured while its machine converts b
    assert [(x.kind, x.ticket.number, x.machine) for x in ex.step(1.0)] == [("convert", c.number, "builder")]
    s.retry(c, 1.5)  # the builder's worker failed: the next try may go anywhere
    assert c.converted_on is None and c.phase is Phase.PROPOSED
    ex.convert_done(b, 2.0)
    # the host measures a; c goes to the builder, never to the measuring machine's free slot
    assert [(x.kind, x.ticket.number, x.machine) for x in ex.step(2.0)] == [
        ("measure", a.number, None),
        ("convert", c.number, "builder"),
    ]


def test_no_conversion_starts_on_a_machine_whose_workers_are_still_starting() -> None:
    """Its trials wait to convert (the time line's converting is then the workers' conversion,
    not their imports and model load); another machine's ready workers convert meanwhile."""
    s = Scheduler(HOST, {HOST: 1, "builder": 1})
    s.add(DeviceState("host", HOST, 10))
    ex = FakeExecutor(s)
    s.placement.converters_starting |= {HOST, "builder"}
    a, b = (ex.propose("host", config(t), 0.0) for t in (1, 2))
    assert ex.step(0.0) == [] and a.phase is b.phase is Phase.PROPOSED
    s.placement.converters_starting.discard("builder")
    assert [(x.kind, x.ticket.number, x.machine) for x in ex.step(1.0)] == [("convert", a.number, "builder")]
    s.placement.converters_starting.discard(HOST)
    assert [(x.kind, x.ticket.number, x.machine) for x in ex.step(2.0)] == [("convert", b.number, HOST)]
    assert a.durations(2.0) == pytest.approx({"proposed": 1.0, "converting": 1.0})  # its wait: waiting to convert


def test_a_retry_after_an_infrastructure_failure_converts_only_once_its_pause_is_over() -> None:
    s = Scheduler(HOST, {HOST: 1})
    s.add(DeviceState("host", HOST, 10))
    ex = FakeExecutor(s)
    a = ex.propose("host", config(1), 0.0)
    assert [(x.kind, x.ticket.number) for x in ex.step(0.0)] == [("convert", a.number)]
    s.retry(a, 1.0, 5.0)  # the worker failed on a full disk: try again in 5 s
    assert a.phase is Phase.PROPOSED
    assert ex.step(5.9) == []  # the slot is free, the pause is not over
    assert [(x.kind, x.ticket.number) for x in ex.step(6.0)] == [("convert", a.number)]


def test_isolation_two_devices_on_one_machine_never_measure_together() -> None:
    _s, ex = scheduler(("a", "box"), ("b", "box"))
    ta, tb = ex.propose("a", config(1), 0.0), ex.propose("b", config(2), 0.0)
    ex.scheduler.placement.converters = {HOST: 2}
    ex.step(0.0)
    ex.convert_done(ta, 1.0)
    ex.convert_done(tb, 1.0)
    first = kinds(ex.step(1.0))
    assert len([k for k in first if k[0] == "measure"]) == 1


def test_duplicate_reuse_measured_configuration_and_twin_in_flight() -> None:
    s, ex = scheduler(("host", HOST))
    a = ex.propose("host", config(), 0.0)
    twin = Ticket("host", 99, config(), a.key)
    assert s.admit(twin, 0.0) == (Admission.TWIN, None) and twin.phase is Phase.TWIN
    ex.step(0.0)
    ex.convert_done(a, 1.0)
    ex.step(1.0)
    settlement = s.settle(a, record(a), 2.0)
    assert settlement.reuse and settlement.reuse[0][0] is twin  # the twin reuses a's measurement
    s.told(a, record(a), 2.0)
    again = Ticket("host", 100, config(), a.key)
    admission, earlier = s.admit(again, 3.0)
    assert admission is Admission.REUSE and earlier is not None and earlier.number == a.number


def test_duplicate_reuse_byte_identical_artifact_is_not_measured_again() -> None:
    _s, ex = scheduler(("host", HOST))
    a = ex.propose("host", config(), 0.0)
    ex.step(0.0)
    ex.convert_done(a, 1.0, sha="same-bytes")
    ex.step(1.0)
    rec = dataclasses.replace(record(a), tags={"artifact_sha256": "same-bytes"})
    ex.told(a, rec, 2.0)
    b = ex.propose("host", config(mode=QuantMode.FP16), 2.0)  # another configuration ...
    ex.step(2.0)
    ex.convert_done(b, 3.0, sha="same-bytes")  # ... whose artifact has the same bytes, run the same way
    assert kinds(ex.step(3.0)) == [("reuse", "host", b.number)]
    s = ex.scheduler
    assert not s.devices["host"].tried(b.key) or b in s.devices["host"].tickets  # in flight only
    ex.told(b, outcomes.reused(b, rec), 4.0)
    # told as a reuse: tried, so the coordinator's moves never queue it again
    assert s.devices["host"].tried(b.key) and b not in s.devices["host"].tickets


def test_a_repeat_of_a_trial_held_for_the_baseline_reuses_it_and_is_not_left_waiting() -> None:
    """A measured trial waits (HELD) until its device's fp32 baseline is known; the same
    configuration proposed meanwhile waited as its twin, and the original, already settled,
    never released it: the sweep stalled one trial short of its budget (a decoder sweep whose
    fp32 baseline converted for two minutes met it)."""
    s, ex = scheduler(("host", HOST))
    base = ex.propose("host", config(2), 0.0, role=Role.BASELINE)
    a = ex.propose("host", config(1, QuantMode.DYNAMIC_INT8), 0.0)
    s.settle(a, record(a), 1.0)
    assert a.phase is Phase.HELD  # measured, told once the baseline is known
    repeat = Ticket("host", 7, config(1, QuantMode.DYNAMIC_INT8), a.key)
    admission, earlier = s.admit(repeat, 2.0)
    assert admission is Admission.REUSE and earlier is not None and earlier.number == a.number
    assert repeat.twin_of is None
    s.settle(repeat, outcomes.reused(repeat, earlier), 2.0)
    out = s.settle(base, record(base), 3.0)
    assert {t.number for t in out.tell} == {base.number, a.number, repeat.number}


def test_a_failed_twin_original_lets_the_twin_run_alone() -> None:
    s, ex = scheduler(("host", HOST))
    a = ex.propose("host", config(), 0.0)
    twin = ex.propose("host", config(), 0.0)
    out = s.failed(a, record(a, TrialStatus.FAILED), 1.0)
    assert out.alone == [twin] and twin.phase is Phase.PROPOSED and twin.twin_of is None


def test_repeats_do_not_spend_the_budget_and_a_finite_space_is_exhausted() -> None:
    s, ex = scheduler(("host", HOST), budget=3)
    s.devices["host"].space_size = 2
    a = ex.propose("host", config(1), 0.0)
    ex.told(a, record(a), 1.0)
    repeat = ex.propose("host", config(1), 1.0)
    ex.told(repeat, dataclasses.replace(record(repeat), status=TrialStatus.REUSED), 1.0)
    d = s.devices["host"]
    assert (d.counted, d.reused) == (1, 1) and s.wanted("host", 1.0) == 1  # 1 configuration left untried
    b = ex.propose("host", config(2), 1.0)
    assert s.wanted("host", 1.0) == 0  # the last one is in flight: nothing more to ask
    ex.told(b, record(b), 2.0)
    assert s.wanted("host", 2.0) == 0 and d.exhausted and s.finished(2.0)


def test_a_configuration_told_as_another_ones_artifact_counts_as_tried_for_exhaustion() -> None:
    """A partition limit that drops nothing converts to the default's bytes: its trial is told as a
    reuse of that measurement under its own key. Once every configuration of a finite space is
    measured, failed or told so, the device wants nothing more and the sweep can end."""
    s, ex = scheduler(("host", HOST), budget=6)
    d = s.devices["host"]
    d.space_size = 3
    a = ex.propose("host", config(1), 0.0)
    ex.told(a, record(a), 1.0)
    same_bytes = ex.propose("host", config(2), 1.0)  # another key, a's artifact
    ex.told(same_bytes, outcomes.reused(same_bytes, record(a)), 2.0)
    assert d.tried(same_bytes.key) and same_bytes.key not in d.measured
    assert s.wanted("host", 2.0) == 1  # config(3) is all that is left untried
    c = ex.propose("host", config(3), 2.0)
    assert s.wanted("host", 2.0) == 0
    ex.told(c, record(c, TrialStatus.FAILED), 3.0)
    assert s.wanted("host", 3.0) == 0 and d.exhausted and s.finished(3.0)


def test_proposing_again_a_configuration_told_as_a_reuse_is_a_repeat() -> None:
    """Without a finite size to exhaust, the repeat cap is what ends a sampler that keeps
    proposing configurations already told; a key told as another's artifact is one of them."""
    s, ex = scheduler(("host", HOST), budget=6)
    d = s.devices["host"]
    a = ex.propose("host", config(1), 0.0)
    ex.told(a, record(a), 1.0)
    same_bytes = ex.propose("host", config(2), 1.0)
    ex.told(same_bytes, outcomes.reused(same_bytes, record(a)), 2.0)
    for n in range(s.repeat_cap):
        assert not d.exhausted
        again = Ticket("host", 100 + n, config(2), same_bytes.key, Role.SEARCH)
        admission, earlier = s.admit(again, 3.0)
        assert admission is Admission.REUSE and earlier is not None and earlier.reused_from == a.number
        ex.told(again, outcomes.reused(again, earlier), 3.0)
    assert d.exhausted and d.counted == 1 and s.finished(3.0)


def test_held_baseline_results_wait_for_the_baseline_then_are_told() -> None:
    s, ex = scheduler(("host", HOST))
    base = ex.propose("host", config(1), 0.0, role=Role.BASELINE)
    fast = ex.propose("host", config(2), 0.0)
    out = s.settle(fast, record(fast), 1.0)
    assert out.tell == [] and fast.phase is Phase.HELD
    assert s.wanted("host", 1.0) == 3 - 1  # held trials are no longer in flight
    out = s.settle(base, record(base), 2.0)
    assert out.tell == [base, fast]  # the baseline first, so the others are judged against it
    assert s.devices["host"].baseline is not None


def test_held_trials_are_released_when_the_baseline_fails() -> None:
    s, ex = scheduler(("host", HOST))
    base = ex.propose("host", config(1), 0.0, role=Role.BASELINE)
    fast = ex.propose("host", config(2), 0.0)
    s.settle(fast, record(fast), 1.0)
    out = s.failed(base, record(base, TrialStatus.FAILED), 2.0)
    assert out.tell == [fast]


def test_hang_watchdog_reports_a_silent_measurement_once() -> None:
    s, ex = scheduler(("host", HOST))
    a = ex.propose("host", config(), 0.0)
    ex.step(0.0)
    ex.convert_done(a, 1.0)
    ex.step(1.0)
    assert s.hung(now=50.0, limit_s=60.0) == []
    assert s.hung(now=62.0, limit_s=60.0) == [a] and a.hung
    assert s.hung(now=100.0, limit_s=60.0) == []


def test_lost_device_is_revived_on_schedule_and_waited_for() -> None:
    s, ex = scheduler(("host", HOST), ("board", "rpi"), budget=2)
    t = ex.propose("board", config(), 0.0)
    ex.step(0.0)
    ex.convert_done(t, 1.0)
    ex.step(1.0)
    s.requeue(t, 10.0, lost=True)
    assert s.devices["board"].lost and s.wanted("board", 10.0) == 0
    assert s.revivals(11.0) == [] and s.revivals(12.0) == ["board"] and s.revivals(13.0) == []
    assert s.revivals(17.0) == ["board"]
    s.devices["host"].budget = 0
    assert not s.finished(20.0)  # within lost_timeout_s of losing it
    assert s.finished(71.0)  # given up: its study resumes on the next run
    s.revived("board")
    assert not s.devices["board"].lost and s.wanted("board", 72.0) == 2


def test_requeued_baseline_goes_back_to_waiting() -> None:
    s, ex = scheduler(("host", HOST))
    base = ex.propose("host", config(), 0.0, role=Role.BASELINE)
    s.requeue(base, 1.0)
    assert base.phase is Phase.REQUEUED and s.devices["host"].baseline_waiting
    other = ex.propose("host", config(2), 1.0)
    assert s.settle(other, record(other), 2.0).tell == []  # held: the baseline will be measured


def test_repeats_in_a_row_divert_the_next_trial_to_an_untried_configuration() -> None:
    s, ex = scheduler(("host", HOST))
    a = ex.propose("host", config(1), 0.0)
    ex.told(a, record(a), 1.0)
    assert (
        not s.diverts("host")
        and s.devices["host"].tried(a.key)
        and not s.devices["host"].tried(reuse_key("model", config(2)))
    )
    for _ in range(s.divert_after):
        again = ex.propose("host", config(1), 1.0)
        ex.told(again, dataclasses.replace(record(again), status=TrialStatus.REUSED, reused_from=a.number), 1.0)
    assert s.diverts("host")
    ex.propose("host", config(2), 2.0)  # the untried one the caller drew
    assert not s.diverts("host")


def test_a_local_cluster_converts_on_every_core_memory_allows() -> None:
    from nnsweep.execution.ray_cluster import CONVERSION_MEMORY, local_conversion_slots

    assert local_conversion_slots(cpus=2, available=24 * 2**30) == 2  # this machine: both cores
    assert local_conversion_slots(cpus=8, available=3 * CONVERSION_MEMORY) == 3  # memory bounds it
    assert local_conversion_slots(cpus=4, available=CONVERSION_MEMORY // 2) == 1  # always one


def test_a_measurement_that_met_other_work_on_its_cores_is_measured_again_once() -> None:
    from concurrent.futures import Future

    from nnsweep.agents import MeasureReply
    from nnsweep.bench import Timing
    from nnsweep.bench._stats import LatencyStats
    from nnsweep.sweep.handlers import Results, SweepStats

    s, ex = scheduler(("laptop", HOST))
    ticket = ex.propose("laptop", config(), 0.0)
    ex.step(1.0)
    ex.convert_done(ticket, 2.0)
    assert kinds(ex.step(3.0)) == [("measure", "laptop", 0)]
    completed: list[float] = []

    class _Results(Results):
        def _complete(self, ticket: Ticket, reply: MeasureReply, *, on_host: bool) -> None:
            completed.append(reply.timing.latency.p50)

    results = _Results(None, None, None, s, None, SweepStats(), 60.0, clock=lambda: 4.0)  # type: ignore[arg-type]

    def reply(p50: float, others: float) -> Future[MeasureReply]:
        # 1 thread on 2 cores for 500 ms of timed runs; ``others`` cores' worth of others' work.
        phases = {"timed": 500.0, "timed_others_cpu": others * 500.0, "timed_spare_cpu": 500.0,
                  "timed_others_cpu_uncertainty": 40.0}  # fmt: skip
        samples = (p50,) * 3
        timing = Timing(1.0, 1.0, LatencyStats.from_samples(samples), samples, 10.0, 5.0, 1, 0.5, phases_ms=phases)
        f: Future[MeasureReply] = Future()
        f.set_result(MeasureReply(timing, [np.zeros(1)]))
        return f

    results.measured(ticket, reply(2.0, others=1.8))  # others filled the spare core and took from its own
    assert ticket.phase is Phase.READY and completed == []
    assert kinds(ex.step(5.0)) == [("measure", "laptop", 0)]  # measured again
    results.measured(ticket, reply(2.1, others=1.8))  # contended again: this figure stands
    assert completed == [2.1]


def test_enough_trials_are_in_flight_to_keep_every_conversion_slot_fed() -> None:
    # Two slots, the default depth: while two conversions run and the first two results wait,
    # ready, for a quiet machine, two more are asked, converted as soon as a slot frees.
    depth = default_depth({HOST: 2})
    s = Scheduler(HOST, 2, lost_timeout_s=60.0)
    s.add(DeviceState("host", HOST, budget=20, depth=depth))
    ex = FakeExecutor(s)
    tickets = [ex.propose("host", config(threads=n + 1), 0.0) for n in range(depth)]
    assert [a.kind for a in ex.step(0.0)] == ["convert", "convert"]
    ex.convert_done(tickets[0], 1.0)
    ex.convert_done(tickets[1], 1.0)  # both ready; no measurement while a conversion could start
    assert s.wanted("host", 1.0) == 0  # the depth is full
    started = ex.step(1.0)
    assert [a.kind for a in started] == ["measure"]  # nothing converts now: the machine measures
    assert default_depth({HOST: 1}) == 3 and depth == 6


def test_queued_starts_are_all_asked_at_once_beyond_the_depth() -> None:
    # The starts wait for no result: asking them all keeps the slots converting through
    # them, instead of idling while the first batch waits to be measured.
    s = Scheduler(HOST, 2, lost_timeout_s=60.0)
    s.add(DeviceState("host", HOST, budget=20, depth=6))
    ex = FakeExecutor(s)
    for n in range(6):
        ex.propose("host", config(threads=n + 1), 0.0)
    assert s.wanted("host", 1.0) == 0  # the depth is full: no proposal of the sampler's
    assert s.wanted("host", 1.0, queued=3) == 3  # but the three starts still queued are asked
    assert s.wanted("host", 1.0, queued=30) == 20 - 6  # never past the budget


def test_a_thread_count_joins_the_conversion_of_the_same_configuration_under_way() -> None:
    # threads is runtime-only: not in the artifact key, so 1 and 2 threads are one conversion.
    s, ex = scheduler(("host", HOST), slots=2)
    one, two = ex.propose("host", config(1, artifact=1), 0.0), ex.propose("host", config(2, artifact=1), 0.0)
    assert kinds(ex.step(0.0)) == [("convert", "host", one.number)]
    assert two.phase is Phase.CONVERTING
    assert s.placement.converting(conversion_digest(one.config)) == [one, two]
