"""The coordinator: one sweep's loop and the rules it follows.

:mod:`~nnsweep.sweep.loop` runs the loop (ask, plan, start, route each future, tell,
track); :mod:`~nnsweep.sweep.handlers` reacts to finished work; :mod:`~nnsweep.sweep.scheduler`,
:mod:`~nnsweep.sweep.placement`, :mod:`~nnsweep.sweep.lifecycle`, :mod:`~nnsweep.sweep.outcomes`
and :mod:`~nnsweep.sweep.front` are the pure rules (what to ask and tell, what starts where,
a trial's phases, its judgement, the Pareto front); :mod:`~nnsweep.sweep.space`,
:mod:`~nnsweep.sweep.sampler` and :mod:`~nnsweep.sweep.moves` the search;
:mod:`~nnsweep.sweep.studies`, :mod:`~nnsweep.sweep.rdb`, :mod:`~nnsweep.sweep.journal`,
:mod:`~nnsweep.sweep.resume`, :mod:`~nnsweep.sweep.recorder` and :mod:`~nnsweep.sweep.state`
what is stored and how it survives a kill. docs/explanation/architecture.md has the map.

The package namespace imports nothing, so the pure modules load in milliseconds; the
public way in is :mod:`nnsweep.api`.
"""

__all__: list[str] = []
