"""The coordinator: one sweep's loop and the rules it follows.

Each module owns one part, from the loop down to the rules it calls:

* :mod:`~nnsweep.sweep.loop`: ``Sweep``, the loop (ask, plan, start, route each future, tell, track);
* :mod:`~nnsweep.sweep.ask`: a device's next trials, asked of its study and admitted to the scheduler;
* :mod:`~nnsweep.sweep.handlers`: what happens when a conversion, measurement or evaluation
  finishes, and the end of a sweep;
* :mod:`~nnsweep.sweep.host`: the coordinator's machine side (the model, its fp32 reference, cache look-ups);
* :mod:`~nnsweep.sweep.resume`: opening each device's study and tracker, settling what a killed run left;
* :mod:`~nnsweep.sweep.recorder`: a finished trial to the study and the tracker, in a kill-safe order;
* :mod:`~nnsweep.sweep.remeasure`: the front measured again in fresh processes;
* :mod:`~nnsweep.sweep.scheduler`: what the studies are asked and told (reuse, budget, the held baseline), pure;
* :mod:`~nnsweep.sweep.placement`: what starts now and where (one measurement per machine, conversion slots), pure;
* :mod:`~nnsweep.sweep.device_state`: one device as the scheduler sees it (its live trials, what it told);
* :mod:`~nnsweep.sweep.lifecycle`: a trial's phases and the one transition function, pure;
* :mod:`~nnsweep.sweep.outcomes`: a trial's record and judgement against the baseline, pure;
* :mod:`~nnsweep.sweep.front`: the Pareto front and the best configuration, pure;
* :mod:`~nnsweep.sweep.space`: a device's search space (spec + capabilities + an Optuna trial -> a configuration);
* :mod:`~nnsweep.sweep.accepted`: what a device's space can hold per runtime, and its size (``nnsweep devices``);
* :mod:`~nnsweep.sweep.sampler`: the Optuna sampler a new study gets;
* :mod:`~nnsweep.sweep.studies`: the one owner of what an Optuna study stores;
* :mod:`~nnsweep.sweep.rdb`: Optuna's database storage, waiting out a database restart;
* :mod:`~nnsweep.sweep.journal`: Optuna's journal file, kept whole when a write to it fails;
* :mod:`~nnsweep.sweep.state`: the run lock and the sweep's fingerprint;
* :mod:`~nnsweep.sweep.preflight`: storage and tracking reachable before anything is written.

The package namespace itself imports nothing, so the pure modules load in milliseconds;
the public way in is :mod:`nnsweep.api`.
"""

__all__: list[str] = []
