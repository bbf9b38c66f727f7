"""The module a model function returned, in the form nnsweep deploys: a Python ``nn.Module``
in float32, in eval mode.

Training and serving code wraps models: ``torch.compile`` returns an ``OptimizedModule``
whose ``_orig_mod`` is the module (torch's FX quantizer and TorchScript cannot take the
wrapper; ``torch.export`` and the ONNX exporter see through it), and a module may hold
compiled submodules. Those wrappers are taken off, so every runtime converts the same
module and the layers keep the names the user wrote. What nnsweep cannot deploy is refused
with what to return instead: a TorchScript module, the module of a ``torch.export``
program (its graph has no submodules to name or to quantize per layer, and its ``eval()``
raises), and parameters in another float dtype. Pruning masks and hook-based weight norms
are made plain weights (:func:`_frozen`).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from nnsweep.core.errors import SpecError

__all__ = ["check_parameter_dtypes", "deployable_module"]


def deployable_module(ref: str, net: Any) -> Any:
    """``net`` with ``torch.compile``'s wrappers taken off, checked and in eval mode (its
    parameters' dtype is checked after the example input's: :func:`check_parameter_dtypes`).

    Raises:
        SpecError: ``net`` is not a module nnsweep can convert, saying what to return instead.
    """
    import torch

    if _is_export_program(net):
        raise SpecError("model", f"{ref}() returned a torch.export program: {_EXPORTED}")
    if not isinstance(net, torch.nn.Module):
        raise SpecError("model", f"{ref}() returned {type(net).__name__}, not a torch.nn.Module")
    net = _uncompiled(net)
    if isinstance(net, torch.jit.ScriptModule):
        raise SpecError(
            "model",
            f"{ref}() returned a TorchScript module ({type(net).__name__}): nnsweep converts through "
            "torch.export, which needs the Python nn.Module; return the module before torch.jit.script or trace",
        )
    try:
        net.eval()
    except NotImplementedError as exc:  # ExportedProgram.module() replaces eval() with this
        if isinstance(net, torch.fx.GraphModule):
            raise SpecError("model", f"{ref}() returned the module of a torch.export program: {_EXPORTED}") from None
        raise SpecError("model", f"{ref}(): the module's eval() raised NotImplementedError: {exc}") from None
    net = _frozen(net)
    _check_copyable(ref, net)
    return net


_EXPORTED = (
    "nnsweep exports the model itself and names and quantizes "
    "its layers by their module paths, which an exported graph no longer has: return the nn.Module "
    "that torch.export was given"
)


def _is_export_program(net: Any) -> bool:
    """Whether ``net`` is a ``torch.export.ExportedProgram`` (without importing torch.export)."""
    exported = sys.modules.get("torch.export.exported_program")
    return exported is not None and isinstance(net, exported.ExportedProgram)


def _uncompiled(net: Any) -> Any:
    """``net`` with every ``torch.compile`` wrapper replaced by the module it wraps: itself (the
    wrapper's ``_orig_mod``, the same parameters), and its submodules' on a copy."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # imported by torch.compile
    if eval_frame is None:
        return net
    wrapper = eval_frame.OptimizedModule

    def unwrapped(module: Any) -> Any:
        while isinstance(module, wrapper):
            module = module._orig_mod
        return module

    net = unwrapped(net)
    if not any(isinstance(sub, wrapper) for sub in net.modules()):
        return net
    net = copy.deepcopy(net)  # a live model's compiled submodules stay the user's
    for parent in list(net.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, wrapper):
                setattr(parent, name, unwrapped(child))
    return net


def _frozen(net: Any) -> Any:
    """``net`` with the training-time forms of its weights made plain: ``torch.nn.utils.prune``'s
    masks and the hook-based ``weight_norm`` and ``spectral_norm`` (each a forward pre-hook that
    computes the weight before every call) replaced by the weight they compute, as
    ``prune.remove`` and ``remove_weight_norm`` leave it for deployment. On a copy when there is
    one: a live model's masks stay the user's. Call in eval mode: a spectral norm's hook
    iterates its vectors in training mode.

    torch.export keeps the hook's computation in the graph, and ExecuTorch's and litert-torch's
    int8 flows then met a weight made by ops ("Expected get_attr node, got call_function");
    torch's FX quantizer replaced the pruned weight ("cannot assign 'torch.FloatTensor' as
    parameter 'weight'"). ``torch.nn.utils.parametrize``'s forms are left to the converters
    (:func:`nnsweep.convert.fx.bake_parametrizations`), which take them.
    """
    import torch
    from torch.nn.utils import prune
    from torch.nn.utils.spectral_norm import SpectralNorm, remove_spectral_norm
    from torch.nn.utils.weight_norm import WeightNorm, remove_weight_norm

    def hooked() -> list[tuple[Any, Any]]:
        return [
            (module, hook)
            for module in net.modules()
            for hook in module._forward_pre_hooks.values()
            if isinstance(hook, prune.BasePruningMethod | WeightNorm | SpectralNorm)
        ]

    found = hooked()
    if not found:
        return net
    with torch.no_grad():  # each hook's weight as a plain tensor: one computed with grad cannot be copied
        for module, hook in found:
            hook(module, ())
    net = copy.deepcopy(net)
    for module, hook in hooked():  # the copy's
        if isinstance(hook, prune.BasePruningMethod):
            prune.remove(module, hook._tensor_name)
        elif isinstance(hook, WeightNorm):
            remove_weight_norm(module, hook.name)
        else:
            remove_spectral_norm(module, hook.name)
    return net


def check_parameter_dtypes(ref: str, net: Any) -> None:
    """Every floating parameter is float32: a ``model.half()`` fed float32 examples fails in
    its first layer with a dtype message that does not say where the fix is."""
    import torch

    for name, parameter in net.named_parameters():
        if parameter.is_floating_point() and parameter.dtype != torch.float32:
            dtype = str(parameter.dtype).removeprefix("torch.")
            raise SpecError(
                "model",
                f"{ref}(): the parameter {name} is {dtype}; nnsweep deploys float32 models (its fp32 baseline) "
                "and makes float16 and int8 itself: give the model as float32 (model.float())",
            )


def _check_copyable(ref: str, net: Any) -> None:
    """Every attribute of every submodule can be deep-copied: each converter converts a copy,
    so that the user's module stays as it was, and an attribute that cannot be copied (a
    ``threading.Lock``, an open file, a client) failed every conversion with "cannot pickle
    '_thread.lock' object" and no word of where it was. Only the attributes that are not
    tensors or submodules are copied here, one by one: the weights are not copied twice.

    Raises:
        SpecError: naming the attribute and its type.
    """
    import torch

    bookkeeping = set(vars(torch.nn.Module()))  # what every module holds: tensors, submodules, hook tables
    for path, module in net.named_modules():
        for name, value in vars(module).items():
            if name in bookkeeping or isinstance(value, torch.Tensor | torch.nn.Module):
                continue
            try:
                copy.deepcopy(value)
            except Exception as exc:  # any failure to copy is the model's: say where it is
                where = f"{path}.{name}" if path else name
                raise SpecError(
                    "model",
                    f"{ref}(): the model's attribute {where} ({type(value).__name__}) cannot be copied "
                    f"({type(exc).__name__}: {exc}); nnsweep converts a copy of the model: hold it outside the "
                    "module, or give the module __deepcopy__",
                ) from None
