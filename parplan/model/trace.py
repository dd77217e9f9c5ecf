"""A user's ``torch.nn.Module`` as model nodes, traced once on the meta device (the torch extra).

A model file's ``torch_module: "package.module:function"`` names a function of an *installed,
importable* module (never a file path: the same trust as a plugin) that returns
``(module, example_input)``. :func:`traced_nodes` calls it with the meta device as the default
(so a model of any size allocates nothing), runs one forward under
``torch.utils.flop_counter.FlopCounterMode``, and makes one node per top-level child, in the order
the children ran:

- ``params``: the child's parameters (a parameter shared by two children counts in the first);
- ``forward_flops``: what the FLOP counter attributes to the child's forward (matmuls,
  convolutions, attention: the ops torch's counter knows; elementwise ops count 0);
- ``activation``: the bytes of the child's output tensors;
- ``saved_activation``: the bytes autograd saves for backward during the child's forward
  (``saved_tensors_hooks``), parameters excluded.

FLOPs and bytes are per sample: divided by the example input's first dimension (its batch size).
A module without children becomes one node. The example input may be a tensor, a tuple or list
(positional arguments) or a dict (keyword arguments, e.g. ``input_ids``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from parplan.config.model import ModelNodeSpec, ModelSpec
from parplan.errors import ModelError

MISSING_TORCH = "a torch_module model needs the torch extra: pip install 'parplan[torch]'"


def _torch() -> Any:
    try:
        import torch
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError as exc:
        raise ModelError(f"{MISSING_TORCH} ({exc})") from None
    return torch, FlopCounterMode


def _builder(target: str) -> Any:
    module_name, _, function = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelError(f"torch_module {target!r}: cannot import {module_name!r} ({exc})") from None
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ModelError(f"torch_module {target!r}: {module_name} has no function {function!r}")
    return fn


def _bytes(value: Any, torch: Any) -> float:
    """Bytes of every tensor in a (nested) output."""
    if isinstance(value, torch.Tensor):
        return float(value.numel() * value.element_size())
    if isinstance(value, list | tuple):
        return sum(_bytes(v, torch) for v in value)
    if isinstance(value, dict):
        return sum(_bytes(v, torch) for v in value.values())
    return 0.0


@contextmanager
def _saved_bytes(torch: Any, params: set[int], sink: list[float]) -> Iterator[None]:
    """Adds to ``sink[0]`` the bytes of every non-parameter tensor autograd saves."""

    def pack(t: Any) -> Any:
        base = t._base if t._base is not None else t
        if id(t) not in params and id(base) not in params:
            sink[0] += float(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield


def traced_nodes(spec: ModelSpec) -> list[ModelNodeSpec]:
    """One :class:`ModelNodeSpec` per top-level child of the module ``spec.torch_module`` names."""
    target = spec.torch_module
    if target is None:
        raise ModelError(f"model {spec.name!r} names no torch_module")
    torch, flop_counter_mode = _torch()
    build = _builder(target)
    with torch.device("meta"):
        try:
            result = build()
        except Exception as exc:  # the user's code: report whatever it raised
            raise ModelError(f"torch_module {target!r} raised {type(exc).__name__}: {exc}") from None
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ModelError(f"torch_module {target!r} must return (torch.nn.Module, example_input)")
    module, example = result
    module = module.to("meta")
    kwargs: dict[str, Any] = {}
    args: tuple[Any, ...]
    if isinstance(example, dict):
        kwargs, args = dict(example), ()
    else:
        args = tuple(example) if isinstance(example, tuple | list) else (example,)
    args = tuple(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
    batch = float(first.shape[0]) if first is not None and first.dim() > 0 else 1.0
    children = list(module.named_children()) or [(type(module).__name__, module)]
    params_of: dict[int, str] = {}
    for name, child in children:
        for p in child.parameters():
            params_of.setdefault(id(p), name)
    param_ids = {id(p) for p in module.parameters()}
    stats: dict[str, dict[str, float]] = {}
    order: list[str] = []
    counter = flop_counter_mode(display=False)
    saved = [0.0]
    handles = []

    def pre(name: str) -> Any:
        def hook(_m: Any, _args: Any) -> None:
            if name not in stats:
                order.append(name)
                stats[name] = {"flops": 0.0, "out": 0.0, "saved": 0.0}
            stats[name]["flops"] -= float(counter.get_total_flops())
            stats[name]["saved"] -= saved[0]

        return hook

    def post(name: str) -> Any:
        def hook(_m: Any, _args: Any, out: Any) -> None:
            stats[name]["flops"] += float(counter.get_total_flops())
            stats[name]["saved"] += saved[0]
            stats[name]["out"] = _bytes(out, torch)

        return hook

    for name, child in children:
        handles.append(child.register_forward_pre_hook(pre(name)))
        handles.append(child.register_forward_hook(post(name)))
    try:
        with counter, _saved_bytes(torch, param_ids, saved):
            module(*args, **kwargs)
    except Exception as exc:  # the user's module: report whatever it raised
        raise ModelError(
            f"torch_module {target!r}: the forward pass raised {type(exc).__name__}: {exc}"
        ) from None
    finally:
        for h in handles:
            h.remove()
    nodes = []
    for name in order:
        child_params = sum(
            float(p.numel()) for p in dict(children)[name].parameters() if params_of.get(id(p)) == name
        )
        s = stats[name]
        nodes.append(
            ModelNodeSpec(
                id=name,
                params=child_params,
                forward_flops_per_sample=s["flops"] / batch,
                activation_bytes_per_sample=s["out"] / batch,
                saved_activation_bytes_per_sample=s["saved"] / batch,
            )
        )
    if not nodes:
        raise ModelError(f"torch_module {target!r}: no child of the module ran in the forward pass")
    return nodes
