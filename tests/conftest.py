"""Shared fixtures: everything lives in tmp_path; the trained digits weights are
shared by the whole session so digits trains once per test run."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def digits(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits", cache_dir=models_dir)


@pytest.fixture(scope="session")
def digits_gn(models_dir: Path):  # type: ignore[no-untyped-def]
    from nnsweep.models import load_model

    return load_model("digits_gn", cache_dir=models_dir)


@pytest.fixture
def cache(tmp_path: Path):  # type: ignore[no-untyped-def]
    from nnsweep.artifacts import ArtifactCache

    return ArtifactCache(tmp_path / "cache")
