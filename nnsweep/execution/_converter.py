"""The conversion worker: keeps the model loaded and converts through the shared cache."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nnsweep.artifacts.cache import Artifact, ArtifactCache, PackedArtifact, default_cache_dir
from nnsweep.core.errors import NnsweepError
from nnsweep.execution._base import ConvertRequest, ModelSource

if TYPE_CHECKING:
    from nnsweep.models import ModelBundle
    from nnsweep.models.decoder import Decoder

__all__ = ["ConverterWorker", "node_machine"]


class ConverterWorker:
    """Converts configurations of one model; the model is loaded once per process."""

    def __init__(self) -> None:
        self._bundles: dict[ModelSource, ModelBundle | Decoder] = {}

    def bundle(self, source: ModelSource, cache: ArtifactCache) -> ModelBundle | Decoder:
        """The model, loaded once (built-in models keep their weights in ``cache``)."""
        if source not in self._bundles and source.decoder:
            from nnsweep.models.decoder import load_decoder

            self._bundles[source] = load_decoder(source.ref, cache.models_dir)
        if source not in self._bundles:
            from nnsweep.models import load_model

            self._bundles[source] = load_model(
                source.ref,
                cache_dir=cache.models_dir,
                weights=source.weights,
                input_shape=source.input_shape,
                data=source.data,
            )
        return self._bundles[source]

    def warm(self, source: ModelSource, runtimes: list[str], ship: bool) -> None:
        """Load the model and import the converters of ``runtimes`` now, while the coordinator
        probes its devices (a few seconds per process that the first conversion would
        otherwise wait for). A converter that cannot load is left for its conversion to report."""
        try:
            self.bundle(source, _cache(source, ship))
        except NnsweepError:
            return  # the first conversion loads it again and fails its trial with this reason
        self.import_converters(runtimes)

    def import_converters(self, runtimes: list[str]) -> None:
        """Import the converters of ``runtimes`` (a few seconds, most of a worker's start-up).
        A converter that cannot load is left for its conversion to report."""
        from nnsweep.core import runtimes as registry

        for name in runtimes:
            try:
                registry.load_object(registry.get(name).converter)
            except (ImportError, NnsweepError):
                continue

    def convert(self, request: ConvertRequest) -> tuple[Artifact | PackedArtifact, bool]:
        """The artifact, and whether it came from the cache.

        With ``request.ship`` (this worker is on another machine than the coordinator) it
        converts into this machine's own cache (:func:`default_cache_dir`) and returns the
        entry as bytes, for the coordinator to put into its cache.
        """
        if not request.ship:
            return self.convert_here(request)
        cache = _cache(request.model, ship=True)
        artifact, hit = self._convert(request, cache)
        return cache.pack(artifact), hit

    def convert_here(self, request: ConvertRequest) -> tuple[Artifact, bool]:
        """Convert into the coordinator's cache (this worker shares its machine)."""
        return self._convert(request, _cache(request.model, ship=False))

    def _convert(self, request: ConvertRequest, cache: ArtifactCache) -> tuple[Artifact, bool]:
        from nnsweep.artifacts import decoder, deploy
        from nnsweep.models.decoder import Decoder

        model = self.bundle(request.model, cache)
        if isinstance(model, Decoder):
            return decoder.convert_cached(model, request.config, cache)
        return deploy.convert(model, request.config, cache)

    def machine(self) -> str:
        """The machine this worker runs on (:func:`node_machine`)."""
        return node_machine()


def _cache(source: ModelSource, ship: bool) -> ArtifactCache:
    """The cache a worker converts into: the coordinator's, or this machine's own when the
    artifact is shipped back (the worker is on another machine)."""
    return ArtifactCache(default_cache_dir() if ship else source.cache_root)


def node_machine() -> str:
    """The machine of this process's Ray node: its ``nnsweep-machine`` label, else the host name."""
    import socket

    import ray

    labels = ray.get_runtime_context().get_node_labels() if ray.is_initialized() else {}
    return str(labels.get("nnsweep-machine") or socket.gethostname())
