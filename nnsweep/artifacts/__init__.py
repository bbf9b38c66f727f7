"""Artifacts: the one key that names what a conversion produces
(:mod:`~nnsweep.artifacts.key`), the content-addressed cache that stores it
(:mod:`~nnsweep.artifacts.cache`), and one deployment end to end — convert through the
cache, measure, evaluate (:mod:`~nnsweep.artifacts.deploy`)."""

__all__: list[str] = []
