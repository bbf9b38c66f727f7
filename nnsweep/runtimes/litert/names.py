"""Module paths from the names litert-torch gives a ``.tflite``'s tensors and op scopes.

It names an op's output by its module stack (``OutlierNet/Sequential_blocks/Block_2/Conv2d_pw1;1``,
fused ops' names joined by ``;``): the attributes make the module path, checked against the
model's modules. Used by ``--explain`` (which layer an intermediate is) and by the
``int4_weight`` conversion (which ops ``quant.float_layers`` keeps float).
"""

from __future__ import annotations

from typing import Any

__all__ = ["module_path"]


def _attribute(segment: str, children: dict[str, Any]) -> str | None:
    """The child attribute ``segment`` (``<class>_<attribute>``) names, the longest that exists."""
    for i, char in enumerate(segment):
        if char == "_" and segment[i + 1 :] in children:
            return segment[i + 1 :]
    return None


def module_path(name: str, root: Any) -> str | None:
    """The module path of a LiteRT tensor ``name`` (see the module docstring) in ``root``, the
    last of the fused ops' names that resolves (``None``: none does)."""
    found = None
    for part in name.split(";"):
        segments = part.split("/")[1:]  # the first is the root module's class
        if not segments:
            continue
        module, path = root, []
        for segment in segments:
            children = dict(module.named_children())
            attribute = _attribute(segment, children)
            if attribute is None:
                break
            path.append(attribute)
            module = children[attribute]
        else:
            found = ".".join(path)
    return found
