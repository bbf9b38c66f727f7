"""Tracking (see :mod:`~nnsweep.tracking.mlflow_tracker`)."""

from nnsweep.tracking.mlflow_tracker import *  # noqa: F403
