"""What passes between a converter, a runner and the coordinator about one artifact:
its input/output representation (:class:`IOSpec`) and where its ops run
(:class:`PartitionReport`, made of :class:`Placement` pieces). Plain data, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DecoderShape", "IOSpec", "PartitionReport", "Placement"]


@dataclass(frozen=True)
class DecoderShape:
    """How a decoder language model's artifact is driven (:mod:`nnsweep.bench.decoding`): the
    artifact file is its prefill graph, ``decode_file`` the decode graph beside it, the prefill
    takes ``prompt_len`` tokens and each KV cache has the shape ``cache``."""

    prompt_len: int
    cache: tuple[int, ...]
    decode_file: str

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_len": self.prompt_len, "cache": list(self.cache), "decode_file": self.decode_file}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecoderShape:
        return cls(int(d["prompt_len"]), tuple(int(n) for n in d["cache"]), str(d["decode_file"]))


@dataclass(frozen=True)
class IOSpec:
    """How the deployed model's input and output are represented.

    A ``core`` model takes and returns float; a ``full`` model takes quantized
    input (``q = round(x / scale) + zero_point``) and returns quantized output.
    """

    input_dtype: str = "float32"
    output_dtype: str = "float32"
    input_scale: float | None = None
    input_zero_point: int | None = None
    output_scale: float | None = None
    output_zero_point: int | None = None
    channels_last: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IOSpec:
        return cls(**data)

    def prepare_input(self, x: np.ndarray) -> np.ndarray:
        """Float input -> what the deployed model takes (quantized for ``full``).

        Token ids (an integer ``x``) stay integers: a model takes them at the width it was
        exported with, which :attr:`input_dtype` does not record (LiteRT's int32 input
        is its runner's to cast to).
        """
        import numpy as np

        if np.issubdtype(np.asarray(x).dtype, np.integer):
            return np.ascontiguousarray(x)
        if self.input_scale is None:
            return np.ascontiguousarray(x, dtype=self.input_dtype)
        info = np.iinfo(self.input_dtype)
        q = np.round(x / self.input_scale) + (self.input_zero_point or 0)
        return np.clip(q, info.min, info.max).astype(self.input_dtype)

    def float_output(self, y: np.ndarray) -> np.ndarray:
        """What the deployed model returns -> float32 (dequantized for ``full``)."""
        import numpy as np

        if self.output_scale is None:
            return np.asarray(y, dtype=np.float32)
        return ((y.astype(np.float32) - (self.output_zero_point or 0)) * self.output_scale).astype(np.float32)


@dataclass(frozen=True)
class Placement:
    """One contiguous piece of the graph given to one backend."""

    backend: str
    nodes: int


@dataclass(frozen=True)
class PartitionReport:
    """Where the ops of a deployed model run.

    Args:
        backends: the preference order the converter was given.
        nodes_by_backend: operator nodes each backend runs (fallback included).
        partitions: the delegated partitions, largest first.
        fallback_ops: operator name -> count of the ops that ran on the fallback
            (the runtime's CPU kernels) instead of a delegate.
        notes: how the order was realised (e.g. a backend that is not available here).
    """

    backends: tuple[str, ...]
    nodes_by_backend: Mapping[str, int]
    partitions: tuple[Placement, ...] = ()
    fallback_ops: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """Number of delegated partitions."""
        return len(self.partitions)

    @property
    def sizes(self) -> list[int]:
        return [p.nodes for p in self.partitions]

    def placement_key(self) -> str:
        """Identical for two artifacts whose ops land on the same backends the same way."""
        parts = ";".join(f"{p.backend}:{p.nodes}" for p in self.partitions)
        nodes = ";".join(f"{k}:{v}" for k, v in sorted(self.nodes_by_backend.items()))
        return f"{parts}|{nodes}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "sizes": self.sizes,
            "nodes_by_backend": dict(self.nodes_by_backend),
            "fallback_ops": dict(self.fallback_ops),
            "backends": list(self.backends),
            "partitions": [{"backend": p.backend, "nodes": p.nodes} for p in self.partitions],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PartitionReport:
        return cls(
            backends=tuple(data["backends"]),
            nodes_by_backend=dict(data["nodes_by_backend"]),
            partitions=tuple(Placement(p["backend"], p["nodes"]) for p in data.get("partitions", ())),
            fallback_ops=dict(data.get("fallback_ops", {})),
            notes=tuple(data.get("notes", ())),
        )

    def render(self) -> str:
        """A few lines for a terminal."""
        lines = [f"Backend order: {' > '.join(self.backends) or '(runtime default)'}"]
        lines.append("Nodes by backend: " + ", ".join(f"{k}={v}" for k, v in self.nodes_by_backend.items()))
        if self.partitions:
            lines.append(f"Delegated partitions: {self.count} (sizes {', '.join(str(s) for s in self.sizes)})")
        else:
            lines.append("Delegated partitions: 0")
        if self.fallback_ops:
            ops = ", ".join(f"{name} x{n}" for name, n in sorted(self.fallback_ops.items()))
            lines.append(f"Fell back: {ops}")
        lines.extend(f"Note: {note}" for note in self.notes)
        return "\n".join(lines)
