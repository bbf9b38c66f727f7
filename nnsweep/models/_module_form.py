"""The module a model function returned, in the form nnsweep deploys: a float32 ``nn.Module`` in eval mode.

Wrappers are taken off (``torch.compile``'s ``OptimizedModule``, compiled submodules,
``nn.DataParallel``), so every runtime converts the same module and layers keep the
user's names. Refused, saying what to return instead: a TorchScript module, a
``torch.export`` program's module (no submodules to quantize per layer), a model already
quantized (each runtime quantizes the float model, and every deployment is measured
against it), parameters in another float dtype or on another device. Pruning masks and
hook-based weight norms become plain weights (:func:`_frozen`), channels-last or
zero-stride weights standard-strided ones (the layout is each runtime's to choose); outputs in a list, named tuple
or nested container become a plain tuple (:func:`with_plain_outputs`).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from nnsweep.core.errors import SpecError
from nnsweep.models._strides import has_standard_strides, standard_tensor

__all__ = [
    "check_parameters",
    "deployable_module",
    "forward_failure",
    "plain_outputs",
    "settled_weights",
    "with_plain_outputs",
]


def deployable_module(ref: str, net: Any) -> Any:
    """``net`` with ``torch.compile``'s and ``DataParallel``'s wrappers taken off, checked and in
    eval mode; its weights are settled once the example input is known (:func:`settled_weights`).

    Raises:
        SpecError: ``net`` is not a module nnsweep can convert, saying what to return instead.
    """
    import torch

    if _is_export_program(net):
        raise SpecError("model", f"{ref}() returned a torch.export program: {_EXPORTED}")
    if not isinstance(net, torch.nn.Module):
        raise SpecError("model", f"{ref}() returned {type(net).__name__}, not a torch.nn.Module")
    net = _uncompiled(_unparallel(net))
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
    return net


def settled_weights(ref: str, net: Any, example: Any) -> Any:
    """``net`` (from :func:`deployable_module`) with its lazy layers initialised by a call on
    ``example``, pruning masks and hook-based weight norms made plain weights, its weights in
    standard strides (:func:`_contiguous`) and every attribute copyable (its parameters' dtype and device are
    checked after the example input's: :func:`check_parameters`).

    Raises:
        SpecError: the model is already quantized, or holds an attribute that cannot be copied.
    """
    _materialise(ref, net, example)
    _refuse_quantized(ref, net)
    _check_copyable(ref, net)  # before the copies below: one of them failed with torch's bare pickle error
    return _contiguous(_frozen(net))


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


def forward_failure(ref: str, example: Any, exc: Exception) -> SpecError:
    """The one line for a model that fails on its own example input: an input error."""
    first = (str(exc).strip().splitlines() or [""])[0][:160]
    return SpecError(
        "model", f"{ref} fails on its example input of shape {tuple(example.shape)}: {type(exc).__name__}: {first}"
    )


def _materialise(ref: str, net: Any, example: Any) -> None:
    """Call ``net`` once on ``example`` when it has lazy layers (``nn.LazyLinear``, ``LazyConv2d``):
    their weights take their shapes from the first call, as the model's own first call would
    give them (on the user's module). Uninitialised, every step after failed with torch's
    "Attempted to use an uninitialized parameter", exit 1."""
    import torch
    from torch.nn.parameter import is_lazy

    if not any(is_lazy(tensor) for tensor in [*net.parameters(), *net.buffers()]):
        return
    try:
        with torch.no_grad():
            net(example)
    except Exception as exc:  # the user's model: any failure on its own example is an input error
        raise forward_failure(ref, example, exc) from None


def _unparallel(net: Any) -> Any:
    """The module inside ``nn.DataParallel`` / ``DistributedDataParallel`` (their ``.module``, as
    a checkpoint is saved): torch's FX quantizer cannot trace the wrapper ("Proxy object cannot
    be iterated"), and the layers keep their own names, not ``module.``-prefixed ones."""
    import torch

    wrappers = (torch.nn.DataParallel, torch.nn.parallel.DistributedDataParallel)
    while isinstance(net, wrappers):
        net = net.module
    return net


# Where torch keeps modules that only a quantized or quantization-prepared model holds.
_QUANTIZED_MODULES = (
    "torch.ao.nn.quantized",
    "torch.ao.nn.intrinsic.quantized",
    "torch.ao.nn.qat",
    "torch.ao.nn.intrinsic.qat",
    "torch.ao.quantization.observer",
    "torch.ao.quantization.fake_quantize",
)


def _refuse_quantized(ref: str, net: Any) -> None:
    """Refuse a model that is already quantized, or prepared for quantization: torch's
    ``quantize_dynamic`` / ``convert`` modules (packed weights: loading failed with "'tuple'
    object has no attribute 'dtype'", exit 1), QAT and observer modules, quantized tensors and
    torchao's quantized weights."""
    for path, module in net.named_modules():
        kind = type(module).__module__
        if kind.startswith(_QUANTIZED_MODULES):
            _quantized(ref, path, f"{kind}.{type(module).__name__}")
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if tensor.is_quantized or type(tensor).__module__.split(".")[0] == "torchao":
                _quantized(ref, f"{path}.{name}" if path else name, f"a {type(tensor).__name__}")


def _quantized(ref: str, where: str, what: str) -> None:
    raise SpecError(
        "model",
        f"{ref}(): the model is already quantized or prepared for it ({where or 'the model'} is {what}): nnsweep "
        "quantizes the float model itself, for each runtime, and measures every deployment against it; return "
        "the model from before quantize_dynamic, prepare, prepare_qat, convert or torchao's quantize_",
    )


def check_parameters(ref: str, net: Any) -> None:
    """Every floating parameter is float32 and on the CPU: a ``model.half()`` fed float32
    examples fails in its first layer with a dtype message that does not say where the fix
    is, and a model on the ``meta`` device (built under ``torch.device("meta")``) or a GPU
    with a device message."""
    import torch

    for name, parameter in net.named_parameters():
        if parameter.device.type != "cpu":
            empty = " (a meta tensor holds no values: load the weights)" if parameter.device.type == "meta" else ""
            raise SpecError(
                "model",
                f"{ref}(): the parameter {name} is on {parameter.device}{empty}; nnsweep converts and measures on "
                "the CPU: give the model on the CPU (model.cpu())",
            )
        if parameter.is_floating_point() and parameter.dtype != torch.float32:
            dtype = str(parameter.dtype).removeprefix("torch.")
            raise SpecError(
                "model",
                f"{ref}(): the parameter {name} is {dtype}; nnsweep deploys float32 models (its fp32 baseline) "
                "and makes float16 and int8 itself: give the model as float32 (model.float())",
            )


def _contiguous(net: Any) -> Any:
    """``net`` with every weight, buffer and tensor attribute in standard strides
    (:mod:`nnsweep.models._strides`), on a copy when one is not: a weight in another memory
    format (``model.to(memory_format=torch.channels_last)``), or a constant made by ``expand``
    or from numpy's ``x[:, None]`` (a stride of 0). The values are the same, the layout is
    each runtime's to choose: ExecuTorch's ``ChannelsLastTaggedReshapePass`` failed on a
    channels-last weight in static int8, and ExecuTorch stores a constant by its dim order,
    which a stride of 0 does not have ("0 in strides is not supported for ExecuTorch")."""
    import torch

    def tensors(model: Any) -> list[Any]:
        # plain tensor attributes too: torch.export makes them constants of the program
        attributes = [v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Tensor)]
        return [*model.parameters(), *model.buffers(), *attributes]

    if all(has_standard_strides(tensor) for tensor in tensors(net)):
        return net
    net = copy.deepcopy(net)  # the user's model keeps its layout
    with torch.no_grad():
        for tensor in tensors(net):
            tensor.data = standard_tensor(tensor.data)  # in place: a weight shared by two layers stays shared
    return net


def plain_outputs(result: Any) -> bool:
    """Whether a model's outputs are a tensor, a tuple of tensors or a dict of tensors by name:
    the structures every exporter here takes. ExecuTorch cannot save a named tuple's structure
    ("Can't serialize TreeSpec of namedtuple"), litert-torch fails on one, and TorchScript
    cannot return a list."""
    import torch

    if isinstance(result, torch.Tensor):
        return True
    if type(result) is tuple:
        return all(isinstance(item, torch.Tensor) for item in result)
    if type(result) is dict:
        return all(isinstance(key, str) and isinstance(item, torch.Tensor) for key, item in result.items())
    return False


def with_plain_outputs(net: Any) -> Any:
    """A copy of ``net`` whose ``forward`` returns its outputs' tensors as a plain tuple, in the
    order nnsweep counts outputs (``torch.utils._pytree`` leaf order, as ``flatten_outputs``
    gives them), so ``Dataset.accuracy_output`` names the same output. The copy's class is a
    subclass of the model's with only ``forward`` replaced: the layers keep their names."""
    from torch.utils import _pytree

    cls = type(net)

    def forward(self: Any, x: Any) -> tuple[Any, ...]:
        return tuple(_pytree.tree_leaves(cls.forward(self, x)))

    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    plain = type(cls.__name__, (cls,), {"forward": forward, **names})
    net = copy.deepcopy(net)
    net.__class__ = plain
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
    (:func:`nnsweep.runtimes.common.fx.bake_parametrizations`), which take them.
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
