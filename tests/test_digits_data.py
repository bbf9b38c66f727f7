"""The built-in digits models' data: scikit-learn's bundled file, read without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest


def test_the_bundled_digits_are_what_load_digits_gives() -> None:
    from sklearn.datasets import load_digits

    from nnsweep.models.digits import bundled_digits

    images, target = bundled_digits()
    raw = load_digits()
    assert images.dtype == raw.images.dtype and np.array_equal(images, raw.images)
    assert target.dtype == raw.target.dtype and np.array_equal(target, raw.target)


def test_without_the_file_load_digits_gives_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from sklearn.datasets import load_digits

    from nnsweep.models.digits import bundled_digits

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # a scikit-learn laid out otherwise
    images, target = bundled_digits()
    assert np.array_equal(images, load_digits().images) and np.array_equal(target, load_digits().target)


def test_the_digits_dataset_does_not_import_scikit_learn() -> None:
    # scikit-learn's import (SciPy with it) cost about 3 s in each process that loads a digits model
    probe = (
        "import sys; from nnsweep.models.digits import digits_dataset; "
        "digits_dataset(); print('sklearn' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"
