"""nnsweep/execution/ray_cluster.py without a cluster: what it does around ``ray.init`` and
``ray.shutdown`` (tests/test_cluster.py runs it on real clusters)."""

from __future__ import annotations

import signal
import sys
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest

from nnsweep.core.config import DeploymentConfig
from nnsweep.core.errors import SpecError
from nnsweep.execution._base import ConvertRequest, ModelSource
from nnsweep.execution._ray_connection import keeping_stop_signals
from nnsweep.execution.ray_cluster import RayExecutor, _check_one_node_each, device_nodes


def test_shutdown_before_any_cluster_does_not_import_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    # A SIGTERM can cut `import ray` short; a second import of the half-initialised module
    # then fails (seen: exit 1 instead of 130 after a SIGTERM while a sweep was opening).
    monkeypatch.setitem(sys.modules, "ray", None)  # any import of ray raises ImportError
    RayExecutor().shutdown()


def test_the_stop_signal_handlers_are_put_back_after_ray_init() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    old = signal.signal(signal.SIGTERM, mine)
    try:
        with keeping_stop_signals():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as Ray's core worker does (its crash handler)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_sigterm_during_ray_init_is_an_interrupt() -> None:
    # ray.init's first SIGTERM handler calls sys.exit(15); the run would exit 15, not 130.
    with pytest.raises(KeyboardInterrupt), keeping_stop_signals():
        sys.exit(signal.SIGTERM)
    with pytest.raises(SystemExit), keeping_stop_signals():
        sys.exit(3)


class _FakeActor:
    """A conversion actor whose calls stay unanswered until the test answers them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[Future[object]] = []
        self.convert = self.warm = self  # actor.convert.remote(...), actor.warm.remote(...)

    def remote(self, *args: object) -> _FakeActor:
        self.calls.append(Future())
        return self

    def future(self) -> Future[object]:
        return self.calls[-1]


def test_a_conversion_goes_to_an_idle_worker_not_to_the_next_in_turn() -> None:
    # An actor works through its calls one by one: sent in turn to a busy one, a conversion
    # waited behind a long one while the other worker idled.
    executor = RayExecutor()
    a, b = _FakeActor("a"), _FakeActor("b")
    executor._converters = {"vm": [a, b]}
    executor._machine = "vm"
    request = ConvertRequest(ModelSource("digits", Path("/nonexistent")), DeploymentConfig(runtime="onnxruntime"))
    executor.convert(request, "vm")  # a: long
    executor.convert(request, "vm")  # b: short
    b.calls[0].set_result(("artifact", False))
    executor.convert(request, "vm")  # in turn it would be a's
    assert (len(a.calls), len(b.calls)) == (1, 2)
    a.calls[0].set_result(("artifact", False))
    b.calls[1].set_result(("artifact", False))
    executor.convert(request, "vm")
    assert (len(a.calls), len(b.calls)) == (2, 2)


def test_a_machine_s_converters_are_ready_once_each_of_its_workers_has_warmed() -> None:
    executor = RayExecutor()
    a, b, c = _FakeActor("a"), _FakeActor("b"), _FakeActor("c")
    executor._converters = {"vm": [a, b], "builder": [c]}
    executor._machine = "vm"
    ready = executor.warm_converters(ModelSource("digits", Path("/nonexistent")), ["onnxruntime"])
    assert set(ready) == {"vm", "builder"} and not any(f.done() for f in ready.values())
    a.calls[0].set_result(None)
    assert not ready["vm"].done()  # b is still loading the model
    b.calls[0].set_exception(RuntimeError("worker died"))  # its first conversion will say so
    c.calls[0].set_result(None)
    assert ready["vm"].result(timeout=1) is None and ready["builder"].result(timeout=1) is None


def test_a_device_two_live_nodes_offer_is_refused_naming_both() -> None:
    """Two boards joined as one device (a copied systemd unit): the agent landed on either,
    the sweep exited 0 and `nnsweep devices` showed one. ``ray.nodes()``'s records, as Ray
    2.60 gives them; the real cluster's case is in tests/test_cluster.py."""

    def node(address: str, machine: str, *resources: str, alive: bool = True) -> dict[str, object]:
        labels, held = {"nnsweep-machine": machine}, dict.fromkeys(resources, 1.0)
        return {"Alive": alive, "NodeManagerAddress": address, "Labels": labels, "Resources": held}

    nodes = [
        node("10.0.0.1", "laptop", "CPU", "device:host"),
        node("10.0.0.5", "pi-a", "device:rpi5"),
        node("10.0.0.6", "pi-b", "device:rpi5"),
        node("10.0.0.7", "pi-c", "device:rpi4", alive=False),
        node("10.0.0.8", "pi-d", "device:rpi4"),
    ]
    offering = device_nodes(nodes)
    assert offering == {
        "host": [("10.0.0.1", "laptop")],
        "rpi5": [("10.0.0.5", "pi-a"), ("10.0.0.6", "pi-b")],
        "rpi4": [("10.0.0.8", "pi-d")],  # a dead node offers nothing
    }
    _check_one_node_each(["host", "rpi4"], offering)
    with pytest.raises(SpecError) as refused:
        _check_one_node_each(["host", "rpi5"], offering)
    assert str(refused.value).startswith(
        "devices: 'rpi5' is offered by 2 nodes of the cluster (10.0.0.5, machine pi-a; 10.0.0.6, machine pi-b)"
    )


def test_a_lost_bridge_device_is_back_once_a_probe_begun_earlier_answers_and_revive_never_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A phone or ssh board has no node to rejoin: it is back when its agent probes it anew
    and it answers. Each revival only looks at the probe an earlier one began (an unreachable
    board's ssh waits out its 20 s connect timeout, and the sweep's loop must go on
    meanwhile); the agent probes again while it lives, a new one only once it died (not a
    new process every 5 s while a phone stays unplugged). Names stand for Ray's object refs;
    the real path runs in tests/test_examples.py."""
    from nnsweep.execution import ray_cluster

    outcomes: dict[str, str | None] = {}  # probe -> None while it runs, else back / away / dead
    agents: list[str] = []

    def agent(name: str) -> SimpleNamespace:
        agents.append(name)

        def probe_again() -> str:
            probe = f"{name}.probe{sum(p.startswith(name) for p in outcomes)}"
            outcomes[probe] = None
            return probe

        return SimpleNamespace(probe_again=SimpleNamespace(remote=probe_again))

    monkeypatch.setattr(ray_cluster, "_unanswered", lambda probe: probe is not None and outcomes[probe] is None)
    monkeypatch.setattr(ray_cluster, "_probe_outcome", lambda probe: outcomes[probe])
    probes: dict[str, object] = {}
    first = agent("first")

    def back() -> bool:
        return ray_cluster._bridge_back("pixel", probes, first, lambda: agent(f"new{len(agents)}"))

    assert not back() and probes == {"pixel": "first.probe0"}  # the live agent probes anew
    assert not back() and probes == {"pixel": "first.probe0"}  # its probe runs: nothing else begins
    outcomes["first.probe0"] = "away"  # adb: device 'R58N123' not found
    assert not back() and probes == {"pixel": "first.probe1"} and agents == ["first"]  # no new process
    outcomes["first.probe1"] = "dead"  # the agent was killed (a hung measurement)
    assert not back() and probes == {"pixel": "new1.probe0"} and agents == ["first", "new1"]
    outcomes["new1.probe0"] = "back"
    assert back() and probes == {}
