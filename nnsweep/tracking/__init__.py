"""Tracking: one MLflow experiment per sweep, a parent run per device, a child run per trial.

* :mod:`~nnsweep.tracking.base`: the :class:`Tracker` contract and :class:`NullTracker`;
* :mod:`~nnsweep.tracking.background`: :class:`BackgroundTracker`, another tracker's calls on one thread;
* :mod:`~nnsweep.tracking.mlflow_tracker`: :class:`MlflowTracker`, the module that talks to MLflow;
* :mod:`~nnsweep.tracking.run_fields`: what a trial's record is as a run (params, tags, metrics);
* :mod:`~nnsweep.tracking.sqlite_store`: a new sqlite database created whole (MLflow's tables), or not at all;
* :mod:`~nnsweep.tracking.uris`: sqlite URIs and artifact locations.
"""

from nnsweep.tracking.background import BackgroundTracker
from nnsweep.tracking.base import NullTracker, Tracker
from nnsweep.tracking.mlflow_tracker import MlflowTracker, tracker_for
from nnsweep.tracking.run_fields import TrialFields, trial_fields
from nnsweep.tracking.uris import absolute_sqlite_uri, artifact_location

__all__ = [
    "BackgroundTracker",
    "MlflowTracker",
    "NullTracker",
    "Tracker",
    "TrialFields",
    "absolute_sqlite_uri",
    "artifact_location",
    "tracker_for",
    "trial_fields",
]
