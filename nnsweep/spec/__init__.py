"""Sweep specifications (see :mod:`~nnsweep.spec.build`)."""

from nnsweep.spec.build import *  # noqa: F403
from nnsweep.spec.build import MAX_INPUT_ELEMENTS, __all__  # noqa: F401
