"""Fuzz programs as data: input specs, op specs, and the Python source they print.

A program is a straight-line function over its inputs.  Every op is an
``OpSpec`` (a kind, the names it reads, its parameters, the names it defines)
and renders to one line of Python; ``Program.source()`` prints the whole
function.  The fuzzer compiles exactly that source (``FuzzCase.build``), so a
repro file that carries the source and the input specs rebuilds the same
program without pickling anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import torch

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# Input layouts.  Each one gives a tensor of the spec's shape whose strides
# differ from the contiguous ones (except "contiguous").
LAYOUTS = (
    "contiguous",
    "channels_last",
    "transposed",
    "strided",
    "offset",
    "expanded",
    "storage_offset",
    "as_strided",
)
# Element offsets of the flat layouts: odd, so that no row starts on a
# vector boundary, and the tensor never starts at its allocation.
STORAGE_OFFSET = 3
AS_STRIDED_OFFSET = 5

# Config variants the check compiles under (both with the overlay flags on
# and off).  "seed" is the forum report's config: every small op becomes its
# own scheduler node, so fusion decides everything.
CONFIGS: dict[str, dict] = {
    "default": {},
    "seed": {"realize_opcount_threshold": 1, "inplace_buffers": False},
}

SOURCE_HEADER = "import torch\nimport torch.nn.functional as F\n"


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input tensor: logical shape, dtype, memory layout, role."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    layout: str = "contiguous"
    role: str = "data"  # "data" (x*) or "weight" (w*: norm weights, broadcast operands)

    def make(
        self, generator: torch.Generator | None, device: str = "cpu"
    ) -> torch.Tensor:
        """The tensor, filled from ``generator`` (ignored on the meta device)."""
        shape, layout = tuple(self.shape), self.layout
        if layout in ("storage_offset", "as_strided") and shape:
            return self._flat_view(generator, device)
        if layout == "transposed" and len(shape) >= 2:
            storage = (*shape[:-2], shape[-1], shape[-2])
        elif layout == "strided" and shape:
            storage = (*shape[:-1], 2 * shape[-1])
        elif layout == "offset" and shape:
            storage = (*shape[:-1], shape[-1] + 1)
        elif layout == "expanded" and shape:
            storage = (1, *shape[1:])
        else:
            storage = shape
        base = self._filled(storage, generator, device)
        if layout == "channels_last" and len(shape) == 4:
            return base.contiguous(memory_format=torch.channels_last)
        if layout == "channels_last" and len(shape) == 5:
            return base.contiguous(memory_format=torch.channels_last_3d)
        if layout == "transposed" and len(shape) >= 2:
            return base.transpose(-1, -2)
        if layout == "strided" and shape:
            return base[..., ::2]
        if layout == "offset" and shape:
            return base[..., 1:]
        if layout == "expanded" and shape:
            return base.expand(shape)
        return base

    def _flat_view(self, generator, device: str) -> torch.Tensor:
        """A view into a flat allocation at an odd element offset:
        "storage_offset" is contiguous after the offset (a ``narrow`` of the
        allocation), "as_strided" also pads every row by one element."""
        shape = tuple(self.shape)
        if self.layout == "storage_offset":
            offset, row = STORAGE_OFFSET, shape[-1]
        else:
            offset, row = AS_STRIDED_OFFSET, shape[-1] + 1
        strides = [1] * len(shape)
        step = row
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = step
            step *= shape[d]
        flat = self._filled((offset + step,), generator, device)
        return flat.as_strided(shape, tuple(strides), offset)

    def _filled(self, storage, generator, device: str) -> torch.Tensor:
        dtype = DTYPES[self.dtype]
        if device == "meta":
            return torch.empty(storage, dtype=dtype, device="meta")
        base = torch.randn(storage, generator=generator, dtype=torch.float32)
        if self.role == "weight":
            base = 1.0 + 0.5 * base
        return base.to(dtype)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One statement: ``outs = <kind rendered with args and params>``."""

    kind: str
    args: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    outs: tuple[str, ...]

    def param(self, name: str, default=None):
        return dict(self.params).get(name, default)

    def render(self) -> str:
        expr = RENDERERS[self.kind](self.args, dict(self.params))
        return f"{', '.join(self.outs)} = {expr}"


@dataclasses.dataclass(frozen=True)
class Program:
    inputs: tuple[InputSpec, ...]
    ops: tuple[OpSpec, ...]
    outputs: tuple[str, ...]

    def input_names(self) -> list[str]:
        return input_names(self.inputs)

    def source(self) -> str:
        lines = [SOURCE_HEADER, "", f"def program({', '.join(self.input_names())}):"]
        lines += [f"    {op.render()}" for op in self.ops]
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines) + "\n"

    def kinds(self) -> list[str]:
        return [op.kind for op in self.ops]


def input_names(inputs) -> list[str]:
    return [
        ("w" if spec.role == "weight" else "x") + str(i)
        for i, spec in enumerate(inputs)
    ]


@dataclasses.dataclass(frozen=True)
class FuzzCase:
    """What one fuzz example checks: a program's source, its inputs, how to compile."""

    source: str
    inputs: tuple[InputSpec, ...]
    input_seed: int = 0
    dynamic: bool = False
    config: str = "default"
    kinds: tuple[str, ...] = ()  # op kinds, for statistics only
    # How the flags-on run compiles: "all" (every overlay flag, loop ordering
    # after fusion included), "shipped" (the flags' defaults, and the shipped
    # speculation bound: the others speculate on every graph) or
    # "without:<flag>" (every flag but that one: the code a flag's absence
    # takes in the features that test it).
    flags: str = "all"
    threads: int = 0  # cpp.threads for both runs; 0: the default
    # $TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES for both runs (0: unset), so
    # that a program of a few MiB streams (0013) and prefetches (0014)
    cache_bytes: int = 0
    # compiled in a batch of its own (check.batch_key): a seed whose branch
    # needs the graph to itself (a lone view, a lone column sum)
    alone: bool = False

    @classmethod
    def from_program(cls, program: Program, **kwargs) -> FuzzCase:
        return cls(
            source=program.source(),
            inputs=tuple(program.inputs),
            kinds=tuple(program.kinds()),
            **kwargs,
        )

    def build(self):
        """The program function, executed from ``source``."""
        namespace: dict[str, Any] = {}
        exec(compile(self.source, "<fuzz program>", "exec"), namespace)  # noqa: S102
        return namespace["program"]

    def make_inputs(self, device: str = "cpu") -> list[torch.Tensor]:
        generator = torch.Generator().manual_seed(self.input_seed)
        return [spec.make(generator, device) for spec in self.inputs]

    @property
    def low_precision(self) -> bool:
        return any(spec.dtype != "float32" for spec in self.inputs) or (
            "bfloat16" in self.source or "float16" in self.source
        )

    def variant(self) -> tuple:
        """The fields added after the first repros, when not at their defaults."""
        return tuple(
            (name, getattr(self, name))
            for name, default in (("flags", "all"), ("threads", 0), ("cache_bytes", 0))
            if getattr(self, name) != default
        )

    def digest(self) -> str:
        # repros written before `variant` existed keep their digests
        key = repr(
            (self.source, self.inputs, self.input_seed, self.dynamic, self.config)
            + self.variant()
        )
        return hashlib.sha256(key.encode()).hexdigest()[:12]


# --- rendering -------------------------------------------------------------


def _dims(dims) -> str:
    dims = list(dims)
    return f"({dims[0]},)" if len(dims) == 1 else "(" + ", ".join(map(str, dims)) + ")"


def _slice(p) -> str:
    if p.get("index") is not None:  # select: drops the dim
        return "[" + ":, " * p["dim"] + f"{p['index']}]"
    start, stop, step = p["start"], p["stop"], p["step"]
    part = f"{'' if start is None else start}:{'' if stop is None else stop}"
    if step != 1:
        part += f":{step}"
    return "[" + ":, " * p["dim"] + part + "]"


def _logit_scale(p: dict) -> str:
    """Softmax over sharpened logits: its exps overflow unless the max is
    subtracted first (0021 relies on the subtraction)."""
    return f" * {p['scale']}" if p.get("scale") else ""


UNARY = {
    "relu": "torch.relu({a})",
    "gelu": "F.gelu({a})",
    "exp": "torch.exp({a}.clamp(-6, 6))",
    "sigmoid": "torch.sigmoid({a})",
    "tanh": "torch.tanh({a})",
    "silu": "F.silu({a})",
    "abs": "torch.abs({a})",
    "neg": "-{a}",
    "square": "{a} * {a}",
    "affine": "{a} * 0.5 + 1.25",
    "rsqrt": "torch.rsqrt({a}.abs() + 1)",
    "log1p": "torch.log1p({a}.abs())",
    "softplus": "F.softplus({a})",
    "erf": "torch.erf({a})",
}

BINARY = {
    "add": "{a} + {b}",
    "mul": "{a} * {b}",
    "sub": "{a} - {b}",
    "maximum": "torch.maximum({a}, {b})",
    "div": "{a} / ({b}.abs() + 1)",
    "where": "torch.where({a} > 0, {a}, {b})",
    "where_cmp": "torch.where({a} > {b}, {b}, {a} * 0.5)",
}


def _render_norm(args, p) -> str:
    x, *rest = args
    weight, bias = (rest + [None, None])[:2]
    kind = p["norm"]
    if kind == "layer_norm":
        return f"F.layer_norm({x}, {_dims(p['shape'])}, {weight}, {bias}, eps=1e-5)"
    if kind == "group_norm":
        return f"F.group_norm({x}, {p['groups']}, {weight}, {bias}, eps=1e-5)"
    if kind == "rms_norm":
        core = f"{x} * torch.rsqrt({x}.pow(2).mean({p['dim']}, keepdim=True) + 1e-6)"
        return f"{core} * {weight}" if weight else core
    if kind == "manual_layer_norm":  # mean/var spelled out, as models often do
        d = p["dim"]
        return (
            f"({x} - {x}.mean({d}, keepdim=True)) * torch.rsqrt("
            f"{x}.var({d}, keepdim=True, correction=0) + 1e-5)"
        )
    raise ValueError(kind)


# In-place updates (``a.add_(b)``): of a program input (the compiled graph
# copies the result back into it) or of an intermediate.
INPLACE = {"add": "add_", "mul": "mul_", "sub": "sub_"}

# Views that read a value shifted or restrided: a reduction's keepdim output
# read another way than its consumer's own index.
SHIFTS = {
    "flip": "{a}.flip({dim})",
    "roll": "torch.roll({a}, {shift}, {dim})",
    # the flat storage shifted by one element, zero-padded at the end
    "flat_shift": "F.pad({a}.flatten()[1:], (0, 1)).view({a}.shape)",
    # the first index of a dim broadcast over it (outer stride 0)
    "first": "{a}.narrow({dim}, 0, 1)",
}


# Reductions that take one dim and return indices (or values and indices),
# and the boolean ones: what the renderer writes for each.
INDEX_REDUCTIONS = ("argmax", "argmin", "max", "min")
BOOL_REDUCTIONS = {"any": "{a} > 2", "all": "{a} > -2"}


def _render_reduce(args, p) -> str:
    (a,) = args
    op, dims, keep = p["op"], _dims(p["dims"]), p["keepdim"]
    if op in INDEX_REDUCTIONS:  # max / min: (values, indices)
        return f"torch.{op}({a}, dim={p['dims'][0]}, keepdim={keep})"
    if op == "prod":  # factors near 1: a long product stays finite
        return f"torch.prod({a}.tanh() * 0.05 + 1, dim={p['dims'][0]}, keepdim={keep})"
    if op in BOOL_REDUCTIONS:  # about one element in 40 decides
        test = BOOL_REDUCTIONS[op].format(a=a)
        return f"torch.{op}({test}, dim={dims}, keepdim={keep})"
    if op in ("var_mean", "var", "std"):
        return (
            f"torch.{op}({a}, dim={dims}, keepdim={keep}, correction={p['correction']})"
        )
    return f"torch.{op}({a}, dim={dims}, keepdim={keep})"


RENDERERS = {
    "unary": lambda args, p: UNARY[p["op"]].format(a=args[0]),
    "binary": lambda args, p: BINARY[p["op"]].format(a=args[0], b=args[1]),
    "reduce": _render_reduce,
    "norm": _render_norm,
    "softmax": lambda args, p: (
        f"torch.{p['op']}({args[0]}{_logit_scale(p)}, dim={p['dim']})"
    ),
    "reshape": lambda args, p: f"{args[0]}.{p['method']}{_dims(p['shape'])}",
    "permute": lambda args, p: (
        f"{args[0]}.permute{_dims(p['perm'])}"
        + (".contiguous()" if p["contiguous"] else "")
    ),
    "to_channels_last": lambda args, p: (
        f"{args[0]}.contiguous(memory_format=torch.channels_last)"
    ),
    "slice": lambda args, p: f"{args[0]}{_slice(p)}",
    "cat": lambda args, p: (
        f"torch.{p.get('op', 'cat')}([{', '.join(args)}], dim={p['dim']})"
    ),
    "pool": lambda args, p: (
        f"F.{p['op']}({args[0]}, {p['kernel']}, stride={p['stride']}, "
        f"padding={p['padding']})"
    ),
    "cast": lambda args, p: f"{args[0]}.to(torch.{p['dtype']})",
    "inplace": lambda args, p: f"{args[0]}.{INPLACE[p['op']]}({args[1]})",
    "shift": lambda args, p: SHIFTS[p["how"]].format(a=args[0], **p),
    "into_slice": lambda args, p: _render_into_slice(args[0], p),
}


def _render_into_slice(a: str, p: dict) -> str:
    """``a`` copied into a slice of a new zero buffer (``out=``-style: the
    kernel that computes ``a`` writes at an offset inside a larger buffer)."""
    dim, start = p["dim"], p["start"]
    return (
        f"(lambda o: (o.narrow({dim}, {start}, {a}.shape[{dim}]).copy_({a}), o)[1])"
        f"({a}.new_zeros({_dims(p['shape'])}))"
    )
