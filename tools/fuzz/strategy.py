"""Hypothesis strategies for random, valid programs aimed at fusion.

``fuzz_cases(params)`` draws a ``FuzzCase``: a straight-line program over one
or two data inputs (plus weights that norms and broadcasts ask for), the seed
of its input values, static or dynamic shapes, and a config variant.  Ops are
drawn one at a time; each reads earlier values (most often the latest, so
that shrinking turns DAGs into chains) and its output shape is inferred by
running the rendered statement on meta tensors, which also rejects invalid
views and shapes before anything is compiled.

Choices are ordered simple-first (op kinds, sizes, layouts), so hypothesis
shrinks failures towards short chains of plain ops on small contiguous
float32 tensors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from .program import (
    BINARY,
    BOOL_REDUCTIONS,
    CONFIGS,
    DTYPES,
    INDEX_REDUCTIONS,
    LAYOUTS,
    UNARY,
    FuzzCase,
    InputSpec,
    OpSpec,
    Program,
    input_names,
)

# Dimension sizes, first the ones hypothesis favours and shrinks to (4 before
# 2: GroupNorm over 4 channels in 2 groups is the smallest that needs the
# overlay's split).  Odd sizes and primes leave vector tails (16 float32
# lanes with AVX-512); 1000 is rare (one choice of many) and the numel cap
# shrinks it when it would not fit.
SIZES = (4, 2, 3, 8, 1, 5, 7, 16, 17, 13, 31, 32, 33, 64, 100, 128, 1000)

# Op kinds and their default weights (how often each is drawn).  Hypothesis
# favours the first choice of a list well beyond its weight, and shrinks
# towards it: norms come first because they are what reaches the overlay
# (outer-loop fusion, re-tiling, splits).
DEFAULT_WEIGHTS = {
    "norm": 4,
    "unary": 4,
    "binary": 4,
    "reduce": 3,
    "softmax": 2,
    "reshape": 2,
    "permute": 2,
    "slice": 1,
    "cat": 1,
    "pool": 1,
    "cast": 1,
    "to_channels_last": 1,
}

# --focus presets: extra weight on the ops that reach particular overlay code.
FOCUS = {
    "all": {},
    # normalizations reach outer-loop fusion, the re-tile and the split
    "norms": {"norm": 12, "reduce": 5, "softmax": 3},
    # layout changes reach loop ordering after fusion
    "layouts": {"permute": 6, "to_channels_last": 3, "reshape": 4, "reduce": 4},
}


@dataclasses.dataclass(frozen=True)
class StrategyParams:
    max_ops: int = 6
    max_numel: int = 65536
    max_extra_outputs: int = 2
    focus: str = "all"
    dynamic: bool | None = None  # None: drawn (about one case in four)
    dtypes: tuple[str, ...] = ("float32",) * 4 + ("bfloat16", "float16")
    targeted: bool = True  # one program in two from a feature-targeted family

    def weights(self) -> dict[str, int]:
        return {**DEFAULT_WEIGHTS, **FOCUS[self.focus]}


@dataclasses.dataclass
class _Value:
    name: str
    meta: torch.Tensor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.meta.shape)

    @property
    def rank(self) -> int:
        return self.meta.dim()

    @property
    def dtype(self) -> str:
        return str(self.meta.dtype).removeprefix("torch.")


class _Builder:
    """Draws ops onto a growing program, tracking values as meta tensors."""

    def __init__(self, draw, params: StrategyParams, dtype: str):
        self.draw = draw
        self.params = params
        self.dtype = dtype
        self.inputs: list[InputSpec] = []
        self.values: list[_Value] = []
        self.ops: list[OpSpec] = []
        self.op_values: list[str] = []
        self._count = 0

    # -- values ------------------------------------------------------------

    def add_input(self, spec: InputSpec) -> str:
        if spec.dtype not in DTYPES:  # shaped after an index or a boolean
            spec = dataclasses.replace(spec, dtype=self.dtype)
        self.inputs.append(spec)
        name = input_names(self.inputs)[-1]
        self.values.append(_Value(name, spec.make(None, device="meta")))
        return name

    def fresh(self) -> str:
        self._count += 1
        return f"v{self._count}"

    def pick(self, pred=None) -> _Value | None:
        """An earlier value, most often the latest one."""
        candidates = [v for v in self.values if pred is None or pred(v)]
        if not candidates:
            return None
        index = self.draw(st.integers(0, len(candidates) - 1))
        return candidates[-1 - index]

    def pick_any(self) -> _Value:
        """An earlier value; there always is one (the inputs)."""
        value = self.pick()
        assert value is not None
        return value

    def try_op(self, kind: str, args, params: dict, n_outs: int = 1) -> OpSpec | None:
        """Run the op on meta tensors; keep it when it is valid and small enough."""
        op = OpSpec(
            kind,
            tuple(args),
            tuple(params.items()),
            tuple(self.fresh() for _ in range(n_outs)),
        )
        namespace: dict[str, Any] = {
            "torch": torch,
            "F": F,
            **{v.name: v.meta for v in self.values},
        }
        try:
            exec(op.render(), namespace)  # noqa: S102 - our own rendered op
            outs = [namespace[name] for name in op.outs]
            valid = all(0 < t.numel() <= self.params.max_numel for t in outs)
        except Exception:  # noqa: BLE001 - any error: not a valid op here
            valid = False
        if not valid:
            self._count -= n_outs  # names stay dense in the printed program
            return None
        for name, tensor in zip(op.outs, outs):
            self.values.append(_Value(name, tensor))
            self.op_values.append(name)
        self.ops.append(op)
        return op

    # -- op kinds ----------------------------------------------------------

    def unary(self) -> OpSpec | None:
        a = self.pick_any()
        return self.try_op(
            "unary", [a.name], {"op": self.draw(st.sampled_from(list(UNARY)))}
        )

    def binary(self) -> OpSpec | None:
        draw = self.draw
        a = self.pick_any()
        op = draw(st.sampled_from(list(BINARY)))
        if draw(st.booleans()):
            b_name = self._broadcast_input(a)
        else:
            b = self.pick(
                lambda v: v.dtype == a.dtype and _broadcastable(a.shape, v.shape)
            )
            b_name = b.name if b is not None else self._broadcast_input(a)
        args = [b_name, a.name] if draw(st.booleans()) else [a.name, b_name]
        return self.try_op("binary", args, {"op": op})

    def _broadcast_input(self, a: _Value) -> str:
        """A new weight input whose shape broadcasts against ``a``."""
        draw = self.draw
        keep = [draw(st.booleans()) for _ in a.shape]
        shape = tuple(s if k else 1 for s, k in zip(a.shape, keep))
        drop = draw(st.integers(0, len(shape)))
        return self.add_input(InputSpec(shape[drop:], a.dtype, "contiguous", "weight"))

    def reduce(self) -> OpSpec | None:
        draw = self.draw
        op = draw(st.sampled_from(REDUCTIONS))
        # An index or a boolean is discrete: over computed values, a summation
        # order (flags on or off, eager) could move it.  Over the inputs it
        # is exact.
        exact = op in INDEX_REDUCTIONS or op in BOOL_REDUCTIONS
        inputs = set(input_names(self.inputs))
        a = self.pick(lambda v: v.rank >= 1 and (not exact or v.name in inputs))
        if a is None:
            return None
        dims = self._dims(a.rank)
        if op in ONE_DIM_REDUCTIONS:
            dims = dims[:1]
        return self.try_op("reduce", [a.name], self._reduce_params(op, a, dims),
                           _REDUCE_OUTS.get(op, 1))  # fmt: skip

    def _reduce_params(self, op: str, a: _Value, dims) -> dict:
        params = {"op": op, "dims": tuple(dims), "keepdim": self.draw(st.booleans())}
        if op in ("var_mean", "var", "std"):
            reduced = math.prod(a.shape[d] for d in dims)
            params["correction"] = self.draw(st.integers(0, 1)) if reduced > 1 else 0
        return params

    def _dims(self, rank: int) -> tuple[int, ...]:
        draw = self.draw
        first = draw(st.integers(0, rank - 1))
        dims = [first]
        if rank >= 2 and draw(st.integers(0, 3)) == 0:
            second = draw(st.integers(0, rank - 1))
            if second != first:
                dims.append(second)
        negative = draw(st.booleans())
        return tuple(d - rank if negative else d for d in sorted(dims))

    def norm(self) -> OpSpec | None:
        draw = self.draw
        a = self.pick(lambda v: v.rank >= 1)
        if a is None:
            return None
        kind = draw(
            st.sampled_from(
                [
                    "group_norm",
                    "layer_norm",
                    "rms_norm",
                    "group_norm",
                    "manual_layer_norm",
                ]
            )
        )
        args, params = [a.name], {"norm": kind}
        if kind == "group_norm" and a.rank >= 2:
            channels = a.shape[1]
            # groups that leave several channels per group first: they split
            divisors = [g for g in range(2, channels) if channels % g == 0]
            params["groups"] = draw(st.sampled_from([*divisors, 1, channels]))
            args += self._affine((channels,), a.dtype)
        elif kind == "layer_norm" or kind == "group_norm":
            params["norm"] = "layer_norm"
            k = draw(st.integers(1, min(2, a.rank)))
            params["shape"] = a.shape[-k:]
            args += self._affine(a.shape[-k:], a.dtype)
        elif kind == "rms_norm":
            params["dim"] = -1
            if draw(st.booleans()):
                args.append(
                    self.add_input(
                        InputSpec(a.shape[-1:], a.dtype, "contiguous", "weight")
                    )
                )
        else:
            params["dim"] = draw(st.sampled_from([-1, *range(a.rank)]))
        return self.try_op("norm", args, params)

    def _affine(self, shape, dtype: str) -> list[str]:
        """Weight and bias of a norm: [w, b] (first choice), [w], [None, b] or []."""
        weight = not self.draw(st.booleans())
        bias = not self.draw(st.booleans())
        if not (weight or bias):
            return []
        spec = InputSpec(tuple(shape), dtype, "contiguous", "weight")
        names = [self.add_input(spec) if weight else "None"]
        if bias:
            names.append(self.add_input(spec))
        return names

    def softmax(self) -> OpSpec | None:
        a = self.pick(lambda v: v.rank >= 1)
        if a is None:
            return None
        op = self.draw(st.sampled_from(["softmax", "log_softmax"]))
        dim = self.draw(st.integers(-a.rank, a.rank - 1))
        params = {"op": op, "dim": dim}
        if self.draw(st.integers(0, 3)) == 0:  # logits of up to a few hundred
            params["scale"] = 48.0
        return self.try_op("softmax", [a.name], params)

    def reshape(self) -> OpSpec | None:
        draw = self.draw
        a = self.pick(lambda v: v.rank >= 1 and v.meta.numel() > 1)
        if a is None:
            return None
        shape = list(a.shape)
        how = draw(st.integers(0, 3))
        if how == 0 and len(shape) >= 2:  # flatten adjacent dims
            i = draw(st.integers(0, len(shape) - 2))
            j = draw(st.integers(i + 1, len(shape) - 1))
            shape[i : j + 1] = [math.prod(shape[i : j + 1])]
        elif how == 1:  # split a dim into two factors
            i = draw(st.integers(0, len(shape) - 1))
            factors = [f for f in range(2, shape[i]) if shape[i] % f == 0]
            if not factors:
                return None
            f = draw(st.sampled_from(factors))
            shape[i : i + 1] = [f, shape[i] // f]
        elif how == 2:  # unsqueeze
            shape.insert(draw(st.integers(0, len(shape))), 1)
        else:  # flatten everything
            shape = [math.prod(shape)]
        if shape == list(a.shape):
            return None
        if not draw(st.booleans()):
            op = self.try_op(
                "reshape", [a.name], {"method": "view", "shape": tuple(shape)}
            )
            if op is not None:
                return op
        return self.try_op(
            "reshape", [a.name], {"method": "reshape", "shape": tuple(shape)}
        )

    def permute(self) -> OpSpec | None:
        a = self.pick(lambda v: v.rank >= 2)
        if a is None:
            return None
        perm = list(self.draw(st.permutations(range(a.rank))))
        if perm == sorted(perm):
            perm[-2], perm[-1] = perm[-1], perm[-2]
        contiguous = self.draw(st.booleans())
        return self.try_op(
            "permute", [a.name], {"perm": tuple(perm), "contiguous": contiguous}
        )

    def to_channels_last(self) -> OpSpec | None:
        a = self.pick(lambda v: v.rank == 4)
        if a is None:
            return None
        return self.try_op("to_channels_last", [a.name], {})

    def slice(self) -> OpSpec | None:
        draw = self.draw
        a = self.pick(lambda v: any(s >= 2 for s in v.shape))
        if a is None:
            return None
        dims = [d for d, s in enumerate(a.shape) if s >= 2]
        dim = draw(st.sampled_from(dims))
        size = a.shape[dim]
        how = draw(st.integers(0, 3))
        params = {"dim": dim, "start": None, "stop": None, "step": 1}
        if how == 3 and a.rank >= 2:  # select one index: a strided lower-rank view
            return self.try_op(
                "slice", [a.name], {"dim": dim, "index": draw(st.integers(0, size - 1))}
            )
        if how == 0:
            params["start"] = draw(st.integers(1, size - 1))
        elif how == 1:
            params["stop"] = draw(st.integers(1, size - 1))
        else:
            params["step"] = 2
        return self.try_op("slice", [a.name], params)

    def cat(self) -> OpSpec | None:
        a = self.pick(lambda v: v.rank >= 1)
        if a is None:
            return None
        if self.draw(st.booleans()):  # stack 2 or 3 values of one shape (interleaves)

            def alike(v: _Value) -> bool:
                return v.shape == a.shape and v.dtype == a.dtype

            same = [self.pick(alike)]
            if self.draw(st.booleans()):
                same.append(self.pick(alike))
            dim = self.draw(st.sampled_from([-1, *range(a.rank + 1)]))
            args = [a.name, *(v.name for v in same if v is not None)]
            return self.try_op("cat", args, {"op": "stack", "dim": dim})
        dim = self.draw(st.integers(0, a.rank - 1))

        def fits(v: _Value) -> bool:
            return (
                v.rank == a.rank
                and v.dtype == a.dtype
                and all(
                    x == y for d, (x, y) in enumerate(zip(v.shape, a.shape)) if d != dim
                )
            )

        b = self.pick(fits)
        assert b is not None  # a itself fits
        return self.try_op("cat", [a.name, b.name], {"dim": dim})

    def pool(self) -> OpSpec | None:
        draw = self.draw
        kernel = draw(st.sampled_from([2, 3]))
        a = self.pick(lambda v: v.rank in (3, 4) and min(v.shape[-2:]) >= kernel)
        if a is None:
            return None
        op = draw(st.sampled_from(["avg_pool2d", "max_pool2d"]))
        stride = draw(st.sampled_from([kernel, 1, 2]))
        padding = draw(st.integers(0, kernel // 2))
        params = {"op": op, "kernel": kernel, "stride": stride, "padding": padding}
        return self.try_op("pool", [a.name], params)

    def cast(self) -> OpSpec | None:
        a = self.pick_any()
        target = (
            "float32"
            if a.dtype != "float32"
            else self.draw(st.sampled_from(["bfloat16", "float16"]))
        )
        return self.try_op("cast", [a.name], {"dtype": target})


# Every reduction kind Inductor lowers, as the random programs draw them.
REDUCTIONS = (
    "sum", "mean", "amax", "var_mean", "amin", "var", "std",
    "argmax", "argmin", "max", "min", "prod", "any", "all",
)  # fmt: skip
ONE_DIM_REDUCTIONS = (*INDEX_REDUCTIONS, "prod")
_REDUCE_OUTS = {"var_mean": 2, "max": 2, "min": 2}


def _broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether ``b`` broadcasts to ``a`` without growing it."""
    if len(b) > len(a):
        return False
    return all(y in (1, x) for x, y in zip(a[len(a) - len(b) :], b))


def _input_shape(draw, max_numel: int) -> tuple[int, ...]:
    rank = draw(st.sampled_from([3, 4, 2, 1]))  # (N, C, L) first: norms over it split
    shape = [draw(st.sampled_from(SIZES)) for _ in range(rank)]
    while math.prod(shape) > max_numel:
        i = shape.index(max(shape))
        shape[i] //= 2
    return tuple(shape)


def _input_layout(draw, shape) -> str:
    layout = draw(st.sampled_from(["contiguous", "contiguous", *LAYOUTS[1:]]))
    if layout == "channels_last" and len(shape) != 4:
        return "contiguous"
    if layout == "transposed" and len(shape) < 2:
        return "contiguous"
    return layout


@st.composite
def programs(draw, params: StrategyParams = StrategyParams()) -> Program:
    dtype = draw(st.sampled_from(params.dtypes))
    builder = _Builder(draw, params, dtype)
    n_data = draw(st.integers(1, 2))
    first = _input_shape(draw, params.max_numel)
    for i in range(n_data):
        # a second data input usually has the first one's shape, so they combine
        shape = (
            first
            if i == 0 or draw(st.booleans())
            else _input_shape(draw, params.max_numel)
        )
        builder.add_input(InputSpec(shape, dtype, _input_layout(draw, shape)))

    weights = params.weights()
    menu = [kind for kind, w in weights.items() for _ in range(w)]
    n_ops = draw(st.integers(1, params.max_ops))
    for _ in range(n_ops):
        kind = draw(st.sampled_from(menu))
        if getattr(builder, kind)() is None:
            builder.unary()  # always valid: keeps the op count and the draw going
    if not builder.op_values:
        builder.try_op("unary", [builder.values[-1].name], {"op": "relu"})
    outputs = [builder.op_values[-1]]
    for _ in range(draw(st.integers(0, params.max_extra_outputs))):
        name = draw(st.sampled_from(builder.op_values))
        if name not in outputs:
            outputs.append(name)
    return Program(tuple(builder.inputs), tuple(builder.ops), tuple(outputs))


# --- feature-targeted programs ------------------------------------------------
#
# Each family builds programs that meet one group of overlay features'
# preconditions, with sizes around their bounds (vector lanes, the 2048 rows
# of two-step variance, the 32 vector iterations of the accumulators, the
# thread count of block fusion).  Ops are the random programs' own kinds, so
# repros and shrinking work alike.

# Row lengths: vector tails (17, 31, 33), the accumulators' 512 floats,
# Welford vs two steps at 2048, odd sizes.
ROW_SIZES = (16, 17, 33, 100, 512, 513, 1000, 1024, 2047, 2048, 2049, 3000, 4096, 4097)
ROW_COUNTS = (4, 1, 2, 3, 7, 8, 16, 17, 32, 64)
# (N, C, L) for reductions over C: N around the thread counts, C and L
# around the vector width.
BLOCK_N = (4, 1, 2, 3, 5, 8)
BLOCK_C = (4, 2, 3, 7, 16, 17, 32, 33)
BLOCK_L = (16, 1, 5, 15, 17, 31, 32, 33, 64, 100)
TARGETED_MAX_NUMEL = 1 << 19


def _capped(shape: list[int], max_numel: int) -> tuple[int, ...]:
    while math.prod(shape) > max_numel:
        i = shape.index(max(shape))
        shape[i] = max(1, shape[i] // 2)
    return tuple(shape)


def _data(builder: _Builder, shape, layout: str = "contiguous") -> _Value:
    builder.add_input(InputSpec(tuple(shape), builder.dtype, layout))
    return builder.values[-1]


def _op(builder: _Builder, kind: str, args, n_outs: int = 1, **params) -> _Value:
    """A targeted op; on meta tensors it must be valid (else the draw is rejected)."""
    op = builder.try_op(kind, [a if isinstance(a, str) else a.name for a in args],
                        params, n_outs)  # fmt: skip
    if op is None:
        raise _Invalid
    return builder.values[-n_outs]


class _Invalid(Exception):
    pass


def _rows_family(draw, b: _Builder) -> None:
    """Norms and row reductions over (rows, L) or GroupNorm over (N, C, L):
    re-tiling, splits, two-step variance, erf, accumulators, invariant loads,
    streaming and prefetch (0002-0004, 0007, 0008, 0010, 0013, 0014)."""
    cores = ["layer_norm", "group_norm", "rms_norm", "manual_layer_norm", "softmax"]
    core = draw(st.sampled_from([*cores, "reduce_combine"]))
    length = draw(st.sampled_from(ROW_SIZES))
    if core == "group_norm":
        channels = draw(st.sampled_from([4, 8, 6, 16, 32, 12]))
        shape = [
            draw(st.sampled_from(ROW_COUNTS)),
            channels,
            max(1, length // channels),
        ]
    else:
        shape = [draw(st.sampled_from(ROW_COUNTS)), length]
    x = _data(b, _capped(shape, b.params.max_numel))
    prologue = draw(st.sampled_from(["none", "gelu", "bias", "erf"]))
    if prologue in ("gelu", "erf"):
        x = _op(b, "unary", [x], op=prologue)
    elif prologue == "bias":
        x = _op(b, "binary", [x, b._broadcast_input(x)], op="add")
    if core in ("layer_norm", "rms_norm", "manual_layer_norm", "group_norm"):
        params: dict = {"norm": core}
        args = [x.name]
        if core == "group_norm":
            channels = x.shape[1]
            divisors = [g for g in range(1, channels + 1) if channels % g == 0]
            params["groups"] = draw(st.sampled_from(divisors))
            args += b._affine((channels,), x.dtype)
        elif core == "layer_norm":
            params["shape"] = x.shape[-1:]
            args += b._affine(x.shape[-1:], x.dtype)
        else:
            params["dim"] = -1
        x = _op(b, "norm", args, **params)
    elif core == "softmax":
        x = _op(
            b,
            "softmax",
            [x],
            op=draw(st.sampled_from(["softmax", "log_softmax"])),
            dim=-1,
        )
    else:
        red = draw(st.sampled_from(["sum", "amax", "amin", "mean", "var"]))
        extra = {"correction": 0} if red == "var" else {}
        r = _op(b, "reduce", [x], op=red, dims=(-1,), keepdim=True, **extra)
        x = _op(b, "binary", [x, r], op=draw(st.sampled_from(["sub", "div", "mul"])))
    after = draw(st.sampled_from(["none", "permute", "slice"]))
    if core == "group_norm" and after == "permute":
        # channels first: the output's loops cannot merge, so the split
        # meets levels the groups do not divide (0003)
        x = _op(b, "permute", [x], perm=(1, 0, 2), contiguous=True)
    elif core == "group_norm" and after == "slice" and x.shape[1] > 2:
        # part of the channels: a consumer the groups do not divide
        x = _op(b, "slice", [x], dim=1, start=None, stop=x.shape[1] - 1, step=1)
        x = _op(b, "unary", [x], op="relu")
    if draw(st.booleans()):
        x = _op(b, "unary", [x], op=draw(st.sampled_from(["relu", "affine", "tanh"])))


def _block_family(draw, b: _Builder) -> None:
    """Reductions over the middle dim of (N, C, L) and their broadcasting
    consumers: outer-block fusion and its local buffers (0009, 0011); the
    reduction read shifted, flipped or from one block for all (0009's bounds
    and outer strides); an input the reduction reads updated in place by its
    result (0009's mutation check)."""
    shape = [draw(st.sampled_from(BLOCK_N)), draw(st.sampled_from(BLOCK_C)),
             draw(st.sampled_from(BLOCK_L))]  # fmt: skip
    x = _data(b, _capped(shape, b.params.max_numel))
    how = draw(
        st.sampled_from(
            ["manual_softmax", "center", "softmax", "scale", "two", "shifted",
             "inplace"]
        )
    )  # fmt: skip
    if how == "shifted":  # the reduction read past its block or across blocks
        r = _op(b, "reduce", [x], op=draw(st.sampled_from(["amax", "mean", "sum"])),
                dims=(1,), keepdim=True)  # fmt: skip
        shift = draw(st.sampled_from(["flat_shift", "first", "roll", "flip"]))
        s = _op(b, "shift", [r], how=shift, dim=draw(st.sampled_from([0, 2])),
                shift=draw(st.sampled_from([1, -1])))  # fmt: skip
        _op(b, "binary", [x, s], op=draw(st.sampled_from(["sub", "mul"])))
        return
    if how == "inplace":  # an input the reduction reads, updated in place by it
        w = _data(b, (x.shape[0], 1, x.shape[2]))
        read = draw(st.sampled_from(["flip", "first", "same"]))
        wr = w if read == "same" else _op(b, "shift", [w], how=read, dim=0, shift=1)
        r = _op(b, "reduce", [_op(b, "binary", [x, wr], op="mul")], op="sum",
                dims=(1,), keepdim=True)  # fmt: skip
        _op(b, "inplace", [w, _op(b, "unary", [r], op="tanh")],
            op=draw(st.sampled_from(["add", "mul", "sub"])))  # fmt: skip
        return
    if how == "manual_softmax":  # its exp only the fused kernels read: 0011
        m = _op(b, "reduce", [x], op="amax", dims=(1,), keepdim=True)
        e = _op(b, "unary", [_op(b, "binary", [x, m], op="sub")], op="exp")
        s = _op(b, "reduce", [e], op="sum", dims=(1,), keepdim=True)
        _op(b, "binary", [e, s], op="div")
    elif how == "softmax":
        _op(
            b,
            "softmax",
            [x],
            op=draw(st.sampled_from(["softmax", "log_softmax"])),
            dim=1,
        )
    elif how == "two":  # centering, then scaling by the centered rows' norm
        m = _op(b, "reduce", [x], op="mean", dims=(1,), keepdim=True)
        c = _op(b, "binary", [x, m], op="sub")
        q = _op(b, "reduce", [_op(b, "unary", [c], op="square")], op="mean",
                dims=(1,), keepdim=True)  # fmt: skip
        _op(b, "binary", [c, q], op="div")
    else:
        red = draw(st.sampled_from(["mean", "amax", "sum", "amin"]))
        r = _op(b, "reduce", [x], op=red, dims=(1,), keepdim=True)
        op = "sub" if how == "center" else draw(st.sampled_from(["div", "mul"]))
        _op(b, "binary", [x, r], op=op)
    if draw(st.booleans()):
        _op(b, "unary", [b.values[-1]], op=draw(st.sampled_from(["relu", "affine"])))


def _layout_family(draw, b: _Builder) -> None:
    """Permutes, transposes and reshapes next to reductions: loop ordering
    after fusion (0005), and the regrouping of fusions it forms (0012)."""
    how = draw(
        st.sampled_from(
            ["permute_reduce", "transpose_center", "reduce_permute", "regroup",
             "reshape_reduce"]
        )
    )  # fmt: skip
    dims = [draw(st.sampled_from(BLOCK_N)), draw(st.sampled_from(BLOCK_C)),
            draw(st.sampled_from(BLOCK_L))]  # fmt: skip
    if how == "regroup":  # min over a middle dim, log_softmax over another
        dims.append(draw(st.sampled_from([2, 3, 5])))
        x = _data(b, _capped(dims, b.params.max_numel))
        v = _op(b, "reduce", [x], op=draw(st.sampled_from(["amin", "amax", "sum"])),
                dims=(2,), keepdim=True)  # fmt: skip
        _op(b, "softmax", [v], op="log_softmax", dim=1)
        return
    if how == "transpose_center":  # a reorder toward a column reduction
        x = _data(b, (dims[1] * dims[0], dims[2]))
        t = _op(b, "permute", [x], perm=(1, 0), contiguous=True)
        t = _op(b, "unary", [t], op=draw(st.sampled_from(["affine", "relu", "square"])))
        r = _op(b, "reduce", [t], op=draw(st.sampled_from(["sum", "amax", "mean"])),
                dims=(0,), keepdim=True)  # fmt: skip
        _op(b, "binary", [t, r], op=draw(st.sampled_from(["add", "sub", "mul"])))
        return
    layout = draw(st.sampled_from(["contiguous", "transposed"]))
    x = _data(b, _capped(dims, b.params.max_numel), layout)
    perm = draw(st.sampled_from([(0, 2, 1), (1, 0, 2), (2, 1, 0), (1, 2, 0)]))
    contiguous = draw(st.booleans())
    if how == "permute_reduce":
        p = _op(b, "permute", [x], perm=perm, contiguous=contiguous)
        dim = draw(st.sampled_from([-1, 1]))
        r = _op(b, "reduce", [p], op=draw(st.sampled_from(["sum", "amax", "mean"])),
                dims=(dim,), keepdim=True)  # fmt: skip
        _op(b, "binary", [p, r], op=draw(st.sampled_from(["sub", "mul"])))
    elif how == "reduce_permute":
        r = _op(b, "reduce", [x], op=draw(st.sampled_from(["sum", "amax", "mean"])),
                dims=(-1,), keepdim=True)  # fmt: skip
        y = _op(b, "binary", [x, r], op="sub")
        _op(b, "permute", [y], perm=perm, contiguous=contiguous)
    else:
        flat = _op(b, "reshape", [x], method="reshape",
                   shape=(x.shape[0], x.shape[1] * x.shape[2]))  # fmt: skip
        r = _op(b, "reduce", [flat], op="sum", dims=(-1,), keepdim=True)
        y = _op(b, "binary", [flat, r], op="div")
        _op(b, "reshape", [y], method="view", shape=x.shape)


def _tiled_outer_family(draw, b: _Builder) -> None:
    """A strided column's pointwise chain, centered per row and stacked: an
    outer-loop local buffer under a vector-tiled outer loop (0006)."""
    shape = [draw(st.sampled_from([4, 2, 3, 8])), draw(st.sampled_from([8, 16, 17, 5])),
             draw(st.sampled_from([32, 17, 64]))]  # fmt: skip
    x = _data(b, shape)
    col = _op(b, "slice", [x], dim=2, index=draw(st.integers(0, shape[2] - 1)))
    soft = _op(b, "unary", [col], op="softplus")
    e = _op(b, "unary", [col], op="erf")
    mix = _op(b, "binary", [soft, e], op=draw(st.sampled_from(["add", "mul"])))
    m = _op(b, "reduce", [mix], op="mean", dims=(-1,), keepdim=True)
    centered = _op(b, "binary", [mix, m], op="sub")
    prod = _op(b, "binary", [centered, e], op="mul")
    _op(b, "cat", [centered, e, prod], op="stack", dim=-1)


def _skip_family(draw, b: _Builder) -> None:
    """A UNet block on (N, C, H, W) maps, channels-last as layout
    optimization leaves them after convolutions: a residual sum stored for a
    GroupNorm (+SiLU) and written into a skip connection's concat, which a
    second GroupNorm reads.  A producer whose members store in other layouts
    (a slice of the concat's channels) comes in front of the statistics'
    fusion (0020's split, 0003, 0009)."""
    n, c = draw(st.sampled_from([1, 2])), draw(st.sampled_from([8, 4, 12, 16, 40]))
    hw = draw(st.sampled_from([4, 2, 3, 8, 16]))
    layout = draw(st.sampled_from(["channels_last", "channels_last", "contiguous"]))
    r = _op(b, "binary", [_data(b, (n, c, hw, hw), layout),
                          _data(b, (n, c, hw, hw), layout)], op="add")  # fmt: skip
    h = r
    if draw(st.booleans()):  # another term on the sum, as attention's output
        h = _op(b, "binary", [r, _data(b, (n, c, hw, hw), layout)], op="add")
    g = _group_norm(draw, b, h)
    skip = _data(b, (n, draw(st.sampled_from([c, c // 2])), hw, hw), layout)
    t = _op(b, "cat", [r, skip] if draw(st.booleans()) else [skip, r], dim=1)
    _op(b, "cat", [g, _group_norm(draw, b, t)], dim=1)


def _outer_reduce_family(draw, b: _Builder) -> None:
    """A reduction over a middle dim whose rows under one output index span
    about 0023's slab bound (128 KiB; in float32 most programs reach it,
    some stay below, bfloat16 ones stay below), whose row count 16 divides or
    not (a masked last block), one time in two over channels-last maps'
    pixels; its result broadcast back over the rows, or a softmax over the
    same dim (0023's blocks of rows)."""
    rows = draw(st.sampled_from([64, 97, 128]))
    width = draw(st.sampled_from([512, 353, 400]))
    op = draw(st.sampled_from(["sum", "amax", "mean", "amin"]))
    if draw(st.booleans()):
        side = draw(st.sampled_from([8, 11]))
        channels = 256 if side == 8 else 136
        batch = max(1, min(2, b.params.max_numel // (channels * side * side * 2)))
        x = _data(b, (batch, channels, side, side * 2), "channels_last")
        dims: tuple[int, ...] = (2, 3)
    else:
        batch = max(1, min(2, b.params.max_numel // (rows * width)))
        x = _data(b, (batch, rows, width))
        dims = (1,)
    if draw(st.integers(0, 3)) == 0:
        _op(b, "softmax", [x], op="softmax", dim=dims[0])
        return
    r = _op(b, "reduce", [x], op=op, dims=dims, keepdim=True)
    _op(b, "binary", [x, r], op=draw(st.sampled_from(["sub", "mul"])))


def _reductions_family(draw, b: _Builder) -> None:
    """Every reduction kind over the inner, middle or outer dim of
    (N, R, W), at sizes around the features' bounds (0023's 128 KiB of rows
    under one output index, the accumulators' 32 vector iterations, vector
    tails), over an input that may start at an odd storage offset; the
    result combined with the input (broadcast back when kept)."""
    op = draw(st.sampled_from(REDUCTIONS))
    rows = draw(st.sampled_from([128, 97, 64, 16, 3]))
    width = draw(st.sampled_from([512, 353, 1000, 17, 64]))
    batch = draw(st.sampled_from([2, 1, 4]))
    shape = _capped([batch, rows, width], b.params.max_numel)
    layout = draw(st.sampled_from(["contiguous", "storage_offset", "transposed"]))
    x = _data(b, shape, layout)
    dims = (draw(st.sampled_from([2, 1, 0])),)
    r = _op(b, "reduce", [x], _REDUCE_OUTS.get(op, 1), **b._reduce_params(op, x, dims))
    if r.rank == x.rank:  # kept: broadcast back over the reduced dim
        _op(b, "binary", [x, r], op="mul")
    else:
        _op(b, "unary", [r], op="affine")


# The pieces the offsets family concatenates: a row normalization realizes
# its result, so Inductor's cat writes it in place, at the piece's offset
# inside the cat's buffer, rather than computing the cat pointwise.
_PIECES = ("softmax", "layer_norm", "exp")
# Pieces of 8 floats more than a multiple of 16: flattened and concatenated
# in front of rows of 512, they start those rows 32 bytes past a 64-byte
# boundary (aligned for AVX2's stores, not for AVX-512's).
HALF_VECTOR_PIECES = ((3, 1000), (1, 24), (5, 40))


def _offsets_family(draw, b: _Builder) -> None:
    """Outputs that start inside a larger buffer, inputs that do not start
    at their allocation: pieces concatenated or stacked (odd row counts put
    the second piece at an odd element offset; flattened rows of 512 after
    a piece of 16k + 8 floats start half a vector off), a result copied into
    a slice of a zero buffer, inputs at odd storage offsets.  Sizes reach the small
    cache sizes of the fuzz cases, so the kernels stream their stores
    (0013, whose aligned stores must check the address) and prefetch."""
    rows = draw(st.sampled_from([1001, 257, 64, 33]))
    width = draw(st.sampled_from([129, 512, 17, 1000]))
    shape = _capped([rows, width], b.params.max_numel // 3)
    layouts = ["storage_offset", "as_strided", "contiguous", "offset"]
    how = draw(st.sampled_from(["cat", "flat_cat", "stack", "into_slice"]))
    if how == "flat_cat":  # whole-vector rows at an offset of half a vector
        head = _data(b, draw(st.sampled_from(HALF_VECTOR_PIECES)))
        body = _data(b, _capped([shape[0], 512], b.params.max_numel // 3))
        flat = [_op(b, "reshape", [_piece(draw, b, v)], method="reshape", shape=(-1,))
                for v in (head, body)]  # fmt: skip
        _op(b, "cat", flat, dim=0)
        return
    count = 1 if how == "into_slice" else 2
    pieces = [
        _piece(draw, b, _data(b, shape, draw(st.sampled_from(layouts))))
        for _ in range(count)
    ]
    if how == "cat":
        _op(b, "cat", pieces, dim=draw(st.sampled_from([0, 1])))
    elif how == "stack":
        _op(b, "cat", pieces, op="stack", dim=draw(st.sampled_from([0, 1, 2])))
    else:
        start = draw(st.sampled_from([1, 3, 16]))
        grown = (shape[0] + start + 2, shape[1])
        _op(b, "into_slice", pieces, dim=0, start=start, shape=grown)


def _piece(draw, b: _Builder, x: _Value) -> _Value:
    kind = draw(st.sampled_from(_PIECES))
    if kind == "softmax":
        return _op(b, "softmax", [x], op="softmax", dim=-1)
    if kind == "layer_norm":
        return _op(b, "norm", [x], norm="layer_norm", shape=(x.shape[-1],))
    return _op(b, "unary", [x], op="exp")


def _group_norm(draw, b: _Builder, x: _Value) -> _Value:
    """GroupNorm over x's channels, SiLU after it one time in two."""
    channels = x.shape[1]
    groups = draw(st.sampled_from([g for g in (2, 4, 8, 1) if channels % g == 0]))
    y = _op(b, "norm", [x, *b._affine((channels,), x.dtype)], norm="group_norm",
            groups=groups)  # fmt: skip
    return _op(b, "unary", [y], op="silu") if draw(st.booleans()) else y


FAMILIES = {
    "rows": _rows_family,
    "block": _block_family,
    "layout": _layout_family,
    "tiled_outer": _tiled_outer_family,
    "skip": _skip_family,
    "outer_reduce": _outer_reduce_family,
    "reductions": _reductions_family,
    "offsets": _offsets_family,
}


@st.composite
def targeted_programs(
    draw, params: StrategyParams = StrategyParams(), family: str | None = None
) -> Program:
    if family is None:
        family = draw(st.sampled_from(list(FAMILIES)))
    dtype = draw(st.sampled_from(params.dtypes))
    targeted = dataclasses.replace(params, max_numel=TARGETED_MAX_NUMEL)
    builder = _Builder(draw, targeted, dtype)
    try:
        FAMILIES[family](draw, builder)
    except _Invalid:
        pass  # keep the ops built so far
    if not builder.op_values:
        builder.try_op("unary", [builder.values[-1].name], {"op": "relu"})
    outputs = [builder.op_values[-1]]
    if len(builder.op_values) > 1 and draw(st.booleans()):
        outputs.append(draw(st.sampled_from(builder.op_values[:-1])))
    return Program(tuple(builder.inputs), tuple(builder.ops), tuple(outputs))


# Cache sizes for $TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES: 0 (the real
# cache, which no fuzz program overflows) first, then sizes that programs
# of 64 KiB to 2 MiB overflow, so they stream (0013) and prefetch (0014).
CACHE_BYTES = (0, 65536, 262144, 1 << 20)


@st.composite
def flag_sets(draw) -> str:
    """How the flags-on compile sets the flags: every flag (loop ordering
    after fusion on) in half the cases, the shipped defaults in one in
    four, and every flag but one in one in four, where a feature takes the
    branch for a partner flag that is off (0019 without 0009 or 0012 ...)."""
    from fusion_overlay.flags import NAMES

    kind = draw(st.sampled_from(["all", "all", "shipped", "without"]))
    return kind if kind != "without" else f"without:{draw(st.sampled_from(NAMES))}"


@st.composite
def fuzz_cases(draw, params: StrategyParams = StrategyParams()) -> FuzzCase:
    """A random or (one case in two) a feature-targeted program, and how
    to compile it: shapes, flags, threads, cache size."""
    targeted = params.targeted and draw(st.booleans())
    family = draw(st.sampled_from(list(FAMILIES))) if targeted else None
    program = draw(targeted_programs(params, family) if targeted else programs(params))
    dynamic = params.dynamic
    if dynamic is None:  # about one case in four
        dynamic = draw(st.booleans()) and draw(st.booleans())
    return FuzzCase.from_program(
        program,
        input_seed=draw(st.integers(0, 2**16)),
        dynamic=dynamic,
        config=draw(st.sampled_from(list(CONFIGS))),
        flags="all" if family == "layout" else draw(flag_sets()),
        threads=draw(st.sampled_from([0, 1, 2, 4])),
        cache_bytes=draw(st.sampled_from(CACHE_BYTES)),
    )


@st.composite
def fuzz_batches(
    draw, params: StrategyParams = StrategyParams(), size: int = 1
) -> tuple[FuzzCase, ...]:
    """Up to ``size`` cases that compile alike (``check.batch_key``): the
    first case's config, dynamic shapes, flags, threads and cache size, with
    programs and input seeds of their own.  Batches are always full (a
    shorter list would save less); a failure is reported on the member that
    fails alone (``check.check_batch``), which shrinks with the rest."""
    from .check import BATCH_SHARED

    first = draw(fuzz_cases(params))
    shared = {name: getattr(first, name) for name in BATCH_SHARED}
    n = max(0, size - 1)
    rest = draw(st.lists(fuzz_cases(params), min_size=n, max_size=n))
    return (first, *(dataclasses.replace(case, **shared) for case in rest))


def sample_cases(n: int, seed: int = 0, params: StrategyParams = StrategyParams()):
    """``n`` cases drawn from ``fuzz_cases`` with a fixed seed: the same ones
    on every run (``python -m tools.fuzz sample``, the cross-ISA compile)."""
    import random

    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    drawn: list[FuzzCase] = []

    @hseed(seed)
    @settings(max_examples=n * 20, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(fuzz_cases(params))
    def collect(case):
        drawn.append(case)

    collect()
    return random.Random(seed).sample(drawn, min(n, len(drawn)))
