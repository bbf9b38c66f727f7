"""The conversion worker: keeps the model loaded and converts through the shared cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.artifacts import Artifact, ArtifactCache
from nnsweep.execution._base import ConvertRequest, ModelSource

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle

__all__ = ["ConverterWorker"]


class ConverterWorker:
    """Converts configurations of one model; the model is loaded once per process."""

    def __init__(self) -> None:
        self._bundles: dict[ModelSource, ModelBundle] = {}

    def bundle(self, source: ModelSource) -> ModelBundle:
        if source not in self._bundles:
            from nnsweep.models import load_model

            cache = ArtifactCache(source.cache_root)
            self._bundles[source] = load_model(
                source.ref, cache_dir=cache.models_dir, weights=source.weights, input_shape=source.input_shape
            )
        return self._bundles[source]

    def convert(self, request: ConvertRequest) -> tuple[Artifact, bool]:
        """The artifact, and whether it came from the cache."""
        from nnsweep import deploy

        return deploy.convert(self.bundle(request.model), request.config, ArtifactCache(request.model.cache_root))

    def machine(self) -> str:
        import socket

        return socket.gethostname()
