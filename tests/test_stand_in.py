"""A toolchain's function stood in for while any block wants it (nnsweep.runtimes.common.stand_in)."""

from __future__ import annotations

import threading
import types

from nnsweep.runtimes.common.stand_in import StandIn


def _own() -> str:
    return "own"


def _stand_in() -> str:
    return "stand-in"


def test_a_function_is_replaced_in_the_block_and_put_back_after() -> None:
    module = types.SimpleNamespace(work=_own)
    stand_in = StandIn(lambda: module, "work", _stand_in)
    with stand_in.block():
        assert module.work() == "stand-in"
        assert stand_in.original is _own  # for the stand-in to call
    assert module.work is _own


def test_nested_and_concurrent_blocks_keep_it_until_the_last_ends() -> None:
    module = types.SimpleNamespace(work=_own)
    stand_in = StandIn(lambda: module, "work", _stand_in)
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with stand_in.block():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with stand_in.block(), stand_in.block():
        pass
    assert module.work is _stand_in  # the other thread's block is still in force
    release.set()
    thread.join(10)
    assert module.work is _own


def test_an_added_method_is_removed_after_and_a_class_s_own_is_left() -> None:
    class Plain:
        pass

    class Own:
        def describe(self) -> str:
            return "own"

    for owner, inside in ((Plain, "stand-in"), (Own, "own")):
        stand_in = StandIn(lambda owner=owner: owner, "describe", lambda self: "stand-in", adds=True)
        with stand_in.block():
            assert owner().describe() == inside  # type: ignore[attr-defined]
        assert ("describe" in vars(owner)) == (owner is Own)


def test_an_owner_without_the_function_is_left_alone() -> None:
    module = types.SimpleNamespace()
    with StandIn(lambda: module, "work", _stand_in).block():
        assert not hasattr(module, "work")
