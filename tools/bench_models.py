"""make bench-models: norms, softmax and whole models at the shapes of real networks.

    python -m tools.bench_models [--quick] [--suite ops|models|pyhpc|all]
                                 [--threads 1,2] [--reps N] [--only NAME,...]
                                 [--profile]

Models: random-init ``transformers`` and ``diffusers`` models built from
their configs (no weights are downloaded), real hidden widths and channel
counts, fewer layers than the full networks so that compiling them stays
affordable on two cores (each spec says what it cut), eval mode, no_grad.

pyhpc: TorchBench's three pyhpc models (equation_of_state,
isoneutral_mixing, turbulent_kinetic_energy), read from the pytorch/benchmark
checkout in ``TORCHBENCH_SRC`` (tools/torchbench.py), at their default eval
size in float32, each variant's outputs checked against the float64 eager
reference.  Nearly all of their time is generated code.  ``--suite all``
includes them when ``TORCHBENCH_SRC`` is set.

Operators: every LayerNorm, GroupNorm (and GroupNorm followed by SiLU),
InstanceNorm, softmax, log_softmax and RMSNorm pattern those models run,
captured from their dynamo graphs (shape, strides, dim) and de-duplicated,
plus the shape lists of upstream's operator benchmarks (float32 rows).

Variants and timing are tools/bench.py's: eager, stock (every overlay flag
off) and patched compiled in one process from fresh code objects, no dynamo
reset between compiling and timing, a recompile while timing is an error,
rotating variant order, several staggered input copies, GLIBC_TUNABLES that
keep freed memory.  Models compile with ``fullgraph=True``: a graph break
would leave the resumed frames cached on the model's own code objects, which
the stock and patched variants would then share.

The floor of a compiled call (one tiny kernel: guards, wrapper, allocation)
is measured in the same run and shown beside the cases whose eager time is
under 0.2 ms.  Per operator case, the patched variant's time inside its
generated code (Inductor's ``call``: allocations and kernels, without
dynamo's guards and AOT autograd's wrapper) is also shown against eager,
beside the rest of the call: those call layers are the same Python for
stock and patched, and cost more than the floor when the call before them
streamed enough memory to evict their data from the caches.  ``--profile``
adds, per model, where the patched compiled model's time goes (C++ kernels
by kind against the aten calls around them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any
from pathlib import Path

from tools import bench

RESULTS_STEM = "models"
PYHPC_STEM = "pyhpc"  # --suite pyhpc alone
TINY_MS = 0.2  # cases below this eager time show the compiled-call floor beside
# Upstream's operator benchmarks, read at these commits of pytorch/pytorch:
UPSTREAM_OPERATOR_BENCHMARKS = {
    "layernorm_test.py": "186481f4630385933a025e059d2526d0ac8d1e7f",
    "groupnorm_test.py": "186481f4630385933a025e059d2526d0ac8d1e7f",
    "instancenorm_test.py": "186481f4630385933a025e059d2526d0ac8d1e7f",
    "softmax_test.py": "07b13b7188633f403929c4a743dfc0c6f691316c",
    "sum_test.py": "07b13b7188633f403929c4a743dfc0c6f691316c",
}
MODEL_INPUT_COPIES = 2  # a model's weights dwarf its inputs
MODEL_WARMUP_ROUNDS = 1


# ---------------------------------------------------------------- models


@dataclasses.dataclass
class ModelSpec:
    name: str
    family: str
    build: Callable  # (quick) -> (module, args)
    note: str  # what the spec keeps and cuts of the real network
    timed: bool = True  # False: only its operator shapes are captured


def _transformers_model(model_cls, config_cls, **config):
    import torch

    torch.manual_seed(0)
    model = model_cls(config_cls(**config))
    return model.eval()


def _token_args(vocab: int, batch: int, seq: int):
    import torch

    return (torch.randint(0, vocab, (batch, seq)),)


def _bert(quick, attn="sdpa"):
    from transformers import BertConfig, BertModel

    layers, batch, seq = (1, 1, 32) if quick else (2, 4, 128)
    model = _transformers_model(
        BertModel,
        BertConfig,
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        num_hidden_layers=layers,
        attn_implementation=attn,
    )
    return model, _token_args(30522, batch, seq)


def _gpt2(quick, attn="sdpa"):
    from transformers import GPT2Config, GPT2Model

    layers, batch, seq = (1, 1, 32) if quick else (2, 4, 128)
    model = _transformers_model(
        GPT2Model,
        GPT2Config,
        n_embd=768,
        n_head=12,
        n_layer=layers,
        attn_implementation=attn,
    )
    return model, _token_args(50257, batch, seq)


def _llama(quick, attn="sdpa"):
    # SmolLM-135M's widths (a LLaMA architecture: RMSNorm, SwiGLU, GQA, RoPE)
    from transformers import LlamaConfig, LlamaModel

    layers, batch, seq = (1, 1, 32) if quick else (2, 1, 256)
    model = _transformers_model(
        LlamaModel,
        LlamaConfig,
        hidden_size=576,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        num_hidden_layers=layers,
        vocab_size=49152,
        max_position_embeddings=2048,
        attn_implementation=attn,
    )
    return model, _token_args(49152, batch, seq)


def _t5(quick, attn="eager"):
    # t5-small's widths; T5's relative attention bias runs eager attention
    import torch
    from transformers import T5Config, T5Model

    layers, batch, src, tgt = (1, 1, 32, 8) if quick else (2, 2, 128, 32)
    model = _transformers_model(
        T5Model,
        T5Config,
        d_model=512,
        d_ff=2048,
        num_heads=8,
        d_kv=64,
        num_layers=layers,
        num_decoder_layers=layers,
        attn_implementation=attn,
    )
    ids = torch.randint(0, 32128, (batch, src))
    decoder_ids = torch.randint(0, 32128, (batch, tgt))

    class EncoderDecoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.t5 = model

        def forward(self, ids, decoder_ids):
            return self.t5(input_ids=ids, decoder_input_ids=decoder_ids)

    return EncoderDecoder().eval(), (ids, decoder_ids)


def _image(batch, size, channels=3):
    import torch

    return (torch.randn(batch, channels, size, size),)


def _vit(quick, attn="sdpa"):
    from transformers import ViTConfig, ViTModel

    layers, batch = (1, 1) if quick else (2, 4)
    model = _transformers_model(
        ViTModel,
        ViTConfig,
        hidden_size=768,
        num_attention_heads=12,
        intermediate_size=3072,
        num_hidden_layers=layers,
        image_size=224,
        attn_implementation=attn,
    )
    return model, _image(batch, 224)


def _swin(quick, attn="sdpa"):
    from transformers import SwinConfig, SwinModel

    depths, batch = ((1, 1, 1, 1), 1) if quick else ((2, 2, 2, 2), 2)
    model = _transformers_model(
        SwinModel,
        SwinConfig,
        embed_dim=96,
        depths=depths,
        num_heads=(3, 6, 12, 24),
        image_size=224,
        attn_implementation=attn,
    )
    return model, _image(batch, 224)


def _convnext(quick, attn=None):
    from transformers import ConvNextConfig, ConvNextModel

    depths, batch = ((1, 1, 1, 1), 1) if quick else ((1, 1, 3, 1), 4)
    model = _transformers_model(
        ConvNextModel,
        ConvNextConfig,
        hidden_sizes=(96, 192, 384, 768),
        depths=depths,
        image_size=224,
    )
    return model, _image(batch, 224)


def _efficientnet(quick, attn=None):
    # EfficientNet-B0 (squeeze-excitation: a mean over the map broadcast back)
    from transformers import EfficientNetConfig, EfficientNetModel

    batch = 1 if quick else 4
    model = _transformers_model(
        EfficientNetModel,
        EfficientNetConfig,
        width_coefficient=1.0,
        depth_coefficient=1.0,
        image_size=224,
        hidden_dim=1280,
    )
    return model, _image(batch, 224)


def _unet(quick, attn=None, sample=32, batch=2):
    # Stable Diffusion 1.x's first two UNet levels (320, 640 channels,
    # GroupNorm(32) + SiLU resnets, attention at 640), no text conditioning
    import torch
    from diffusers import UNet2DModel

    if quick:
        sample, batch = 16, 1
    torch.manual_seed(0)
    model: Any = UNet2DModel(
        sample_size=sample,
        in_channels=4,
        out_channels=4,
        block_out_channels=(320, 640),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=64,
    )
    model.eval()

    class Denoise(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.unet = model

        def forward(self, latents, timestep):
            return self.unet(latents, timestep).sample

    return Denoise().eval(), (
        torch.randn(batch, 4, sample, sample),
        torch.tensor([10.0]),
    )


def _unet_sd_latents(quick, attn=None):
    return _unet(quick, sample=64, batch=2)


MODELS = (
    ModelSpec(
        "bert",
        "transformers",
        _bert,
        "BERT-base widths (768, 12 heads, 3072), 2 of 12 layers, batch 4 x 128 tokens",
    ),
    ModelSpec(
        "gpt2",
        "transformers",
        _gpt2,
        "GPT-2 small widths (768, 12 heads), 2 of 12 layers, batch 4 x 128 tokens",
    ),
    ModelSpec(
        "llama",
        "transformers",
        _llama,
        "LLaMA architecture at SmolLM-135M widths (576, 9/3 heads, 1536), "
        "2 of 30 layers, 1 x 256 tokens",
    ),
    ModelSpec(
        "t5",
        "transformers",
        _t5,
        "t5-small widths (512, 8 heads, 2048), 2+2 of 6+6 layers, "
        "batch 2, 128 source / 32 target tokens",
    ),
    ModelSpec(
        "vit",
        "transformers",
        _vit,
        "ViT-B/16 widths (768, 12 heads, 3072), 2 of 12 layers, 4 images of 224",
    ),
    ModelSpec(
        "swin",
        "transformers",
        _swin,
        "Swin-T widths (96..768, 3..24 heads), depths 2,2,2,2 of 2,2,6,2, "
        "2 images of 224",
    ),
    ModelSpec(
        "convnext",
        "transformers",
        _convnext,
        "ConvNeXt-T widths (96..768), depths 1,1,3,1 of 3,3,9,3, 4 images of 224",
    ),
    ModelSpec(
        "efficientnet",
        "transformers",
        _efficientnet,
        "EfficientNet-B0, full depth, 4 images of 224",
    ),
    ModelSpec(
        "unet",
        "diffusers",
        _unet,
        "UNet2DModel, SD 1.x widths 320/640 (2 of 4 levels), GroupNorm(32)+SiLU, "
        "1 resnet per level, 2 latents of 32x32",
    ),
    ModelSpec(
        "unet_sd_latents",
        "diffusers",
        _unet_sd_latents,
        "the same UNet at SD 1.x's 64x64 latents, batch 2 (operator shapes only)",
        timed=False,
    ),
)
# Models whose attention the default (SDPA) hides: their softmax shapes are
# captured again from the same model with eager attention.
EAGER_ATTENTION_CAPTURE = ("bert", "gpt2", "llama", "vit", "swin")


# ---------------------------------------------------------------- capture


@dataclasses.dataclass(frozen=True)
class OpCase:
    """One operator at one shape: what the op suite times."""

    kind: str  # layer_norm, group_norm, group_norm_silu, instance_norm, softmax, ...
    shape: tuple[int, ...]
    order: tuple[int, ...]  # dims from outermost to innermost in memory
    param: tuple  # normalized_shape / (num_groups,) / (dim,)

    @property
    def name(self) -> str:
        shape = "x".join(map(str, self.shape))
        layout = (
            ""
            if self.order == tuple(range(len(self.shape)))
            else "_perm" + "".join(map(str, self.order))
        )
        param = ",".join(map(str, self.param))
        return f"{self.kind}({param})_{shape}{layout}"


def _stride_order(value) -> tuple[int, ...]:
    """Dims from the largest stride to the smallest: the dense layout a replay
    builds.  A size-1 dim's stride means nothing; it sorts as if it sat just
    outside the next larger dim after it."""
    rank = value.dim()

    def span(d):
        for later in range(d, rank):
            if value.size(later) > 1:
                return value.stride(later) * value.size(later)
        return 1

    def key(d):
        stride = value.stride(d) if value.size(d) > 1 else span(d + 1)
        return (-stride, d)

    return tuple(sorted(range(rank), key=key))


def _target_name(node) -> str:
    target = node.target
    return (
        target if isinstance(target, str) else getattr(target, "__name__", str(target))
    )


def _arg(node, index, name, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _value(node):
    return node.meta.get("example_value") if hasattr(node, "meta") else None


def _normalize_dim(dim, rank):
    if isinstance(dim, (list, tuple)):
        return tuple(d % rank for d in dim)
    return (dim % rank,)


def cases_in_graph(gm) -> list[OpCase]:
    """The normalization, softmax and reduction patterns of a dynamo FX graph."""
    cases = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        case = _case_of(node)
        if case is not None:
            cases.append(case)
    return cases


def _case_of(node):
    name = _target_name(node)
    x = node.args[0] if node.args else None
    value = _value(x) if x is not None and hasattr(x, "meta") else None
    if value is None or not hasattr(value, "shape"):
        return None
    shape, order = tuple(value.shape), _stride_order(value)
    if name == "layer_norm":
        return OpCase(
            "layer_norm", shape, order, tuple(_arg(node, 1, "normalized_shape"))
        )
    if name == "group_norm":
        users = list(node.users)
        silu = len(users) == 1 and _target_name(users[0]) == "silu"
        kind = "group_norm_silu" if silu else "group_norm"
        return OpCase(kind, shape, order, (_arg(node, 1, "num_groups"),))
    if name == "instance_norm":
        return OpCase("instance_norm", shape, order, ())
    if name in ("softmax", "log_softmax", "_softmax"):
        dim = _arg(node, 1, "dim")
        return OpCase(name.lstrip("_"), shape, order, _normalize_dim(dim, len(shape)))
    if name == "rms_norm":
        return OpCase("rms_norm", shape, order, (len(shape) - 1,))
    keepdim = _arg(node, 2, "keepdim", False)
    if name == "mean" and keepdim and x is not None and _is_square(x):
        base = _value(x.args[0])
        assert base is not None  # _is_square checked it
        dim = _normalize_dim(_arg(node, 1, "dim"), base.dim())
        return OpCase("rms_norm", tuple(base.shape), _stride_order(base), dim)
    if name in REDUCTIONS and _arg(node, 1, "dim") is not None and len(shape) > 1:
        dim = _normalize_dim(_arg(node, 1, "dim"), len(shape))
        return OpCase(name, shape, order, dim)
    if name in ("adaptive_avg_pool1d", "adaptive_avg_pool2d"):
        pooled = _arg(node, 1, "output_size")
        if pooled in (1, (1,), [1], (1, 1), [1, 1]):
            spatial = 1 if name.endswith("1d") else 2
            dims = tuple(range(len(shape) - spatial, len(shape)))
            return OpCase("mean", shape, order, dims)
    return None


# Reductions captured on their own (the model's pooling, a sum over tokens):
# the ones over a dim other than the innermost in memory are outer
# reductions, which 0023 splits into blocks of rows.
REDUCTIONS = ("sum", "mean", "amax")


def _is_square(node) -> bool:
    return (
        getattr(node, "op", None) in ("call_function", "call_method")
        and _target_name(node) == "pow"
        and len(node.args) > 1
        and node.args[1] == 2
        and _value(node.args[0]) is not None
    )


def capture_cases(module, args) -> list[OpCase]:
    """Trace ``module(*args)`` with dynamo and read its graphs' patterns."""
    import torch

    cases: list[OpCase] = []

    def backend(gm, example_inputs):
        cases.extend(cases_in_graph(gm))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(bench._fresh(module), backend=backend, dynamic=False)(*args)
    torch._dynamo.reset()
    return cases


def model_cases(quick: bool, only: set[str]) -> dict[OpCase, list[str]]:
    """Every model's operator cases, de-duplicated, with the models they come from."""
    found: dict[OpCase, list[str]] = {}
    for spec in MODELS:
        if only and spec.name not in only:
            continue
        runs: list[tuple[str, dict]] = [("", {})]
        if spec.name in EAGER_ATTENTION_CAPTURE:
            runs.append((" (eager attention)", {"attn": "eager"}))
        for suffix, kwargs in runs:
            module, args = spec.build(quick, **kwargs)
            for case in capture_cases(module, args):
                sources = found.setdefault(case, [])
                if spec.name + suffix not in sources and spec.name not in sources:
                    sources.append(spec.name + suffix)
    return found


def upstream_cases(quick: bool) -> dict[OpCase, list[str]]:
    """The float32 shapes of upstream's operator benchmarks (see
    UPSTREAM_OPERATOR_BENCHMARKS for the commits read)."""
    cases: dict[OpCase, list[str]] = {}

    def add(case, source):
        cases.setdefault(case, []).append(source)

    def dense(shape):
        return tuple(range(len(shape)))

    layernorm = [(1, 8, 16), (8, 8, 16), (32, 8, 16), (64, 128, 56, 56)]
    for shape in layernorm[:1] if quick else layernorm:
        add(
            OpCase("layer_norm", shape, dense(shape), shape[1:]),
            "upstream layernorm_test",
        )
    for shape in [(32, 8, 16)] if quick else [(32, 8, 16), (32, 8, 56, 56)]:
        for groups in (2, 4):
            add(
                OpCase("group_norm", shape, dense(shape), (groups,)),
                "upstream groupnorm_test",
            )
        add(
            OpCase("instance_norm", shape, dense(shape), ()),
            "upstream instancenorm_test",
        )
    # nn.Softmax() / nn.Softmax2d / nn.LogSoftmax() on NCHW: dim 1
    softmax = [(1, 3, 256, 256), (4, 3, 256, 256)]
    if not quick:
        softmax += [
            (n, 3, h, w) for n in (8, 16) for h in (256, 512) for w in (256, 512)
        ]
    for shape in softmax[:1] if quick else softmax:
        for kind in ("softmax", "log_softmax"):
            add(OpCase(kind, shape, dense(shape), (1,)), "upstream softmax_test")
    # sum_test.py: x.sum(dim) over (R, V) for dim 0, (V, R) for dim 1, R the
    # reduced length; its non-contiguous variants (every other row and
    # column of a larger tensor) are left out: a replay is dense
    sums = [(r, v) for r in (64, 256) for v in (32, 512)]
    sums += [(r, v) for r in (1024, 8192) for v in (512, 1024)]
    for r, v in sums[:1] if quick else sums:
        for dim in (0, 1):
            shape = (r, v) if dim == 0 else (v, r)
            add(OpCase("sum", shape, dense(shape), (dim,)), "upstream sum_test")
    if not quick:
        for shape, dim in [((700, 23258), 0), ((700, 23258), 1), ((1024, 23258), 1)]:
            add(
                OpCase("log_softmax", shape, dense(shape), (dim,)),
                "upstream softmax_test",
            )
    return cases


def _replay_input(case: OpCase):
    import torch

    base = torch.randn([case.shape[d] for d in case.order])
    inverse = sorted(range(len(case.order)), key=lambda d: case.order[d])
    return base.permute(inverse)


def op_fn(case: OpCase):
    """A module or function that runs ``case`` as the model did."""
    import torch

    channels = case.shape[1] if len(case.shape) > 1 else 1
    if case.kind == "layer_norm":
        return torch.nn.LayerNorm(list(case.param))
    if case.kind in ("group_norm", "group_norm_silu"):
        norm = torch.nn.GroupNorm(case.param[0], channels)
        if case.kind == "group_norm":
            return norm
        return torch.nn.Sequential(norm, torch.nn.SiLU())
    if case.kind == "instance_norm":  # InstanceNorm1d/2d/3d by rank
        rank = max(len(case.shape) - 2, 1)
        return getattr(torch.nn, f"InstanceNorm{rank}d")(channels, affine=True)
    if case.kind in ("softmax", "log_softmax"):
        op = getattr(torch, case.kind)
        (dim,) = case.param
        return lambda x: op(x, dim)
    if case.kind in REDUCTIONS:
        op, dims = getattr(torch, case.kind), list(case.param)
        return lambda x: op(x, dims)
    if case.kind == "rms_norm":
        weight = torch.randn([case.shape[d] for d in case.param])
        dims = list(case.param)
        view = [case.shape[d] if d in case.param else 1 for d in range(len(case.shape))]

        def rms(x):  # LlamaRMSNorm / T5LayerNorm
            variance = x.pow(2).mean(dims, keepdim=True)
            return weight.view(view) * (x * torch.rsqrt(variance + 1e-6))

        rms.weight = weight  # type: ignore[attr-defined]
        return rms
    raise ValueError(f"unknown operator case {case.kind}")


def op_workload(case: OpCase) -> bench.Workload:
    def make():
        x = _replay_input(case)
        fn = op_fn(case)
        if isinstance(fn, __import__("torch").nn.Module):
            fn.eval()
        if case.kind in REDUCTIONS:  # reads x, writes a reduced tensor
            return fn, (x,), bench.nbytes(x, fn(x))
        return fn, (x,), 2 * bench.nbytes(x)

    return bench.Workload(case.name, make)


# ---------------------------------------------------------------- timing


def _floor_workload() -> bench.Workload:
    """The cheapest compiled call that runs a kernel: one float plus one."""

    def make():
        import torch

        return (lambda x: x + 1), (torch.ones(1),), 8

    return bench.Workload("compiled_call_floor", make)


def _model_workload(spec: ModelSpec, quick: bool) -> bench.Workload:
    def make():
        module, args = spec.build(quick)
        return module, args, sum(bench.nbytes(p) for p in module.parameters())

    return bench.Workload(spec.name, make)


def _run_rows(suite: str, workloads, opts, threads, **timing) -> list[dict]:
    """Time every workload at every thread count; rows go to opts.partial[suite]."""
    rows: list[dict] = opts.partial.setdefault(suite, [])
    for workload, extra in workloads:
        for t in threads:
            try:
                row = bench.run_workload(
                    workload, t, opts.reps, opts.copy_gbs, **timing
                )
            except Exception as error:  # one model's failure keeps the others
                row = {
                    "workload": workload.name,
                    "threads": t,
                    "error": repr(error)[:300],
                }
                print(f"  {workload.name} t={t}: {row['error']}", flush=True)
            else:
                print(
                    f"  {workload.name:40s} t={t} eager {row['eager_median_ms']:.3f} "
                    f"stock {row['stock_median_ms']:.3f} patched "
                    f"{row['patched_median_ms']:.3f} ms (median) "
                    f"nests {row['stock_nests']}->{row['patched_nests']}",
                    flush=True,
                )
            rows.append({**row, **extra})
            opts.save_partial()
    return rows


def run_ops(opts, threads) -> list[dict]:
    only = {n for n in opts.only.split(",") if n}
    cases = model_cases(opts.quick, only)
    if not only:
        for case, sources in upstream_cases(opts.quick).items():
            cases.setdefault(case, []).extend(sources)
    print(f"operator cases: {len(cases)} (de-duplicated)", flush=True)
    workloads = [(_floor_workload(), {"sources": ["floor"]})]
    workloads += [(op_workload(c), {"sources": s}) for c, s in cases.items()]
    return _run_rows("ops", workloads, opts, threads, fullgraph=True)


def run_models(opts, threads) -> list[dict]:
    only = {n for n in opts.only.split(",") if n}
    specs = [s for s in MODELS if s.timed and (not only or s.name in only)]
    prefix = "--quick: fewer layers and smaller inputs than " if opts.quick else ""
    workloads = [
        (_model_workload(s, opts.quick), {"note": prefix + s.note}) for s in specs
    ]
    rows = _run_rows(
        "models",
        workloads,
        opts,
        threads,
        fullgraph=True,
        copies=MODEL_INPUT_COPIES,
        warmup=MODEL_WARMUP_ROUNDS,
    )
    if opts.profile:
        for spec in specs:
            profile = profile_model(spec, opts.quick, threads[0])
            for row in rows:
                if row["workload"] == spec.name:
                    row["profile"] = profile
    return rows


def run_pyhpc(opts, threads) -> list[dict]:
    from tools import torchbench

    only = {n for n in opts.only.split(",") if n}
    for workload in torchbench.pyhpc_workloads():
        if not only or workload.name in only:  # each with its own float64 check
            _run_rows("pyhpc", [(workload, {})], opts, threads, fullgraph=True,
                      check=torchbench.pyhpc_check(workload.name))  # fmt: skip
    return opts.partial.get("pyhpc", [])


# ---------------------------------------------------------------- profile

NORM_MARKERS = (
    "layer_norm",
    "group_norm",
    "softmax",
    "pow_rsqrt",
    "rsqrt",
    "mean",
    "var",
)


def _kernel_kind(name: str) -> str | None:
    if "cpp_fused" in name or name.startswith("graph_"):
        return (
            "norm and softmax kernels"
            if any(m in name for m in NORM_MARKERS)
            else "other C++ kernels"
        )
    if any(
        op in name for op in ("mm", "linear", "convolution", "conv", "bmm", "matmul")
    ):
        return "matmul / conv (aten)"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention (aten)"
    return None


def profile_model(spec: ModelSpec, quick: bool, threads: int, reps: int = 5) -> dict:
    """Self CPU time of the patched compiled model, by kind of kernel."""
    import torch
    from torch._inductor import config
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    module, args = spec.build(quick)
    torch._dynamo.reset()
    compiled = torch.compile(bench._fresh(module), dynamic=False, fullgraph=True)
    with config.patch(
        {"cpp.enable_kernel_profile": True, "force_disable_caches": True}
    ):
        with torch.no_grad():
            compiled(*args)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            compiled(*args)
    kinds: dict[str, float] = {}
    top = []
    total = 0.0
    for event in prof.key_averages():
        kind = _kernel_kind(event.key)
        if kind is None:
            continue
        ms = event.self_cpu_time_total / 1e3 / reps
        kinds[kind] = kinds.get(kind, 0.0) + ms
        total += ms
        top.append((ms, event.key))
    top.sort(reverse=True)
    torch._dynamo.reset()
    return {
        "threads": threads,
        "ms": kinds,
        "total_ms": total,
        "top": [(name, ms) for ms, name in top[:8]],
    }


# ---------------------------------------------------------------- report


def _fmt_ratio(row, key):
    if key not in row:
        return "-"
    low_high = row.get(f"{key}_range")
    if low_high:
        return f"{row[key]:.2f} ({low_high[0]:.2f}-{low_high[1]:.2f})"
    return f"{row[key]:.2f}"


def _fmt_ms(row, key):
    return f"{row[key]:.3f}" if key in row else "-"


def markdown(result: dict) -> str:
    floor = {
        r["threads"]: r["patched_median_ms"]
        for r in result["ops"]
        if r["workload"] == "compiled_call_floor" and "error" not in r
    }
    lines = [result["header"], ""]
    if result["models"]:
        lines += [
            "### Models (end to end)",
            "",
            "| model | thr | eager ms (median) | stock ms | patched ms | stock/eager "
            "| patched/eager | patched/stock | nests stock→patched "
            "| compile s stock / patched |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_model_line(r) for r in result["models"]]
        lines += ["", "Model configs:", ""]
        notes = {r["workload"]: r.get("note", "") for r in result["models"]}
        lines += [f"- {name}: {note}" for name, note in notes.items()]
        lines += _profile_lines(result["models"])
    if result.get("pyhpc"):
        lines += [
            "",
            "### TorchBench pyhpc models (float32; errors against the float64 eager"
            " reference, relative to its largest magnitude)",
            "",
            "| model | thr | eager ms (median) | stock ms | patched ms | stock/eager "
            "| patched/eager | patched/stock | nests stock→patched "
            "| error eager / stock / patched | check | roofline |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_pyhpc_line(r) for r in result["pyhpc"]]
    if result["ops"]:
        lines += [
            "",
            "### Operators at the models' shapes and upstream's operator-benchmark"
            " shapes",
            "",
            "| case | from | thr | eager ms (median) | stock ms | patched ms "
            "| stock/eager | patched/eager | patched/stock | nests stock→patched "
            "| compiled-call floor ms | patched generated code / eager "
            "| patched call layers ms |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [_op_line(r, floor) for r in result["ops"]]
    return "\n".join(lines) + "\n"


RATIOS = ("stock_over_eager", "patched_over_eager", "patched_over_stock")


def merge_processes(runs: list[dict]) -> dict:
    """One result from runs of the same suite in separate processes: each
    row keeps the first process's times and nests, its ratios become the
    median over the processes, with ``<ratio>_range`` (lowest, highest)."""
    merged = dict(runs[0])
    merged["processes"] = len(runs)
    merged["partial"] = any(r.get("partial") for r in runs)
    for suite in ("models", "pyhpc", "ops"):
        rows = []
        for row in runs[0].get(suite, []):
            key = (row["workload"], row["threads"])
            same = [
                r
                for run in runs
                for r in run.get(suite, [])
                if (r["workload"], r["threads"]) == key and "error" not in r
            ]
            row = dict(row)
            if len(runs) > 1 and "error" not in row:
                for ratio in RATIOS:
                    values = [r[ratio] for r in same]
                    row[ratio] = statistics.median(values)
                    row[f"{ratio}_range"] = (min(values), max(values))
            rows.append(row)
        merged[suite] = rows
    return merged


def _ratios(r):
    return " | ".join(_fmt_ratio(r, key) for key in RATIOS)


def _times(r):
    return " | ".join(
        f"{r[f'{v}_median_ms']:.3f}" for v in ("eager", "stock", "patched")
    )


def _model_line(r):
    if "error" in r:
        return f"| {r['workload']} | {r['threads']} | error: {r['error']} |||||||"
    return (
        f"| {r['workload']} | {r['threads']} | {_times(r)} | "
        f"{_ratios(r)} | {r['stock_nests']}→{r['patched_nests']} | "
        f"{r['stock_compile_s']:.0f} / {r['patched_compile_s']:.0f} |"
    )


def _pyhpc_line(r):
    if "error" in r:
        return f"| {r['workload']} | {r['threads']} | error: {r['error']} ||||||||||"
    errors = " / ".join(
        f"{r[f'{v}_f64_error']:.1e}" for v in ("eager", "stock", "patched")
    )
    if r.get("eager_f32_nonfinite"):
        errors += f" ({r['eager_f32_nonfinite']:,} non-finite in eager left out)"
    return (
        f"| {r['workload']} | {r['threads']} | {_times(r)} | {_ratios(r)} | "
        f"{r['stock_nests']}→{r['patched_nests']} | {errors} | {r['f64_check']} | "
        f"{r['roofline']:.2f} |"
    )


def _op_line(r, floor):
    sources = ", ".join(r.get("sources", []))
    if "error" in r:
        return (
            f"| {r['workload']} | {sources} | {r['threads']} | "
            f"error: {r['error']} ||||||||||"
        )
    tiny = r["eager_median_ms"] < TINY_MS and r["workload"] != "compiled_call_floor"
    floor_ms = f"{floor[r['threads']]:.3f}" if tiny and r["threads"] in floor else ""
    return (
        f"| {r['workload']} | {sources} | {r['threads']} | {_times(r)} | "
        f"{_ratios(r)} | {r['stock_nests']}→{r['patched_nests']} | "
        f"{floor_ms} | {_fmt_ratio(r, 'patched_generated_over_eager')} | "
        f"{_fmt_ms(r, 'patched_call_layers_median_ms')} |"
    )


def _profile_lines(rows):
    lines: list[str] = []
    for r in rows:
        profile = r.get("profile")
        if not profile or r["threads"] != profile["threads"]:
            continue
        if not lines:
            lines += [
                "",
                "Where the patched models' time goes (torch.profiler, self CPU ms "
                "per call; `cpp.enable_kernel_profile`):",
                "",
            ]
        kinds = ", ".join(f"{k} {v:.2f}" for k, v in sorted(profile["ms"].items()))
        top = "; ".join(f"{name} {ms:.2f}" for name, ms in profile["top"][:4])
        lines.append(f"- {r['workload']} (t={profile['threads']}): {kinds}. Top: {top}")
    return lines


def geomean(values):
    values = list(values)
    return statistics.geometric_mean(values) if values else float("nan")


# ---------------------------------------------------------------- main


def _run_child(opts, out: Path) -> dict:
    """Run the suites in a child under ``opts.malloc`` (by default glibc's
    malloc with tunables that keep freed memory).  The child rewrites
    ``out`` after every row: a run cut short still reports what it timed."""
    from tools import bench_alloc

    env = bench_alloc.environment(opts.malloc, dict(os.environ))
    args = [
        sys.executable,
        "-m",
        "tools.bench_models",
        "--child",
        str(out),
        "--suite",
        opts.suite,
        "--threads",
        opts.threads,
        "--reps",
        str(opts.reps),
        "--only",
        opts.only,
    ]
    args += ["--quick"] * opts.quick + ["--profile"] * opts.profile
    returncode = subprocess.run(args, env=env).returncode
    if not out.exists():
        raise SystemExit(
            f"the benchmark child failed (exit {returncode}) before any row"
        )
    result = json.loads(out.read_text())
    result["partial"] = returncode != 0
    return result


def _child(opts) -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore", message=".*force_disable_caches")
    threads = sorted({int(t) for t in opts.threads.split(",")})
    opts.copy_gbs = bench._copy_bandwidth(5)
    from torch._inductor import cpu_vec_isa

    result = {
        "torch": torch.__version__,
        "isa": str(cpu_vec_isa.pick_vec_isa() or "no vectors"),
        "copy_gbs": opts.copy_gbs,
        "ops": [],
        "models": [],
        "pyhpc": [],
        "cpu_pressure": [bench._cpu_pressure()],
    }

    def save_partial():
        result["cpu_pressure"][1:] = [bench._cpu_pressure()]
        opts.child.write_text(json.dumps(result))

    opts.partial, opts.save_partial = result, save_partial
    bench._compile(lambda x: x.sum(0) + 1, (torch.randn(8, 8),), overlay=False)
    if opts.suite in ("models", "all"):
        run_models(opts, threads)
    if opts.suite == "pyhpc" or (
        opts.suite == "all" and os.environ.get("TORCHBENCH_SRC")
    ):
        run_pyhpc(opts, threads)
    if opts.suite in ("ops", "all"):
        run_ops(opts, threads)
    save_partial()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke test: tiny configs")
    parser.add_argument(
        "--suite", choices=("ops", "models", "pyhpc", "all"), default="all"
    )
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument(
        "--only", default="", help="model names (their ops, their runs)"
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="run the suite in N processes one after another; ratios show "
        "the median of the processes and their range",
    )
    parser.add_argument(
        "--malloc",
        default="tuned",
        help="the allocator (tools/bench_alloc.py's: default, tuned, jemalloc, "
        "jemalloc-kept, tcmalloc); results of another than tuned go to "
        "files named after it",
    )
    parser.add_argument("--out", type=Path, default=bench.RESULTS_DIR)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.reps is None:
        opts.reps = 3 if opts.quick else 15
    if opts.child:
        _child(opts)
        return 0
    if opts.suite == "pyhpc":
        from tools import torchbench

        try:
            torchbench.checkout()
        except torchbench.TorchBenchError as error:
            parser.error(str(error))
    with tempfile.TemporaryDirectory() as tmp:
        runs = [
            _run_child(opts, Path(tmp) / f"result-{i}.json")
            for i in range(opts.processes)
        ]
    result = merge_processes(runs)
    result["header"] = _header(opts, result)
    result["run"] = bench.run_record(
        sys.argv[1:] if argv is None else argv,
        result.get("isa", "?"),
        module="tools.bench_models",
    )
    text = markdown(result)
    print(text)
    stem = (PYHPC_STEM if opts.suite == "pyhpc" else RESULTS_STEM) + (
        "_quick" if opts.quick else ""
    )
    if opts.malloc != "tuned":
        stem += f"_{opts.malloc}"
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / f"{stem}.md").write_text(text)
    (opts.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    chart_rows = [
        r
        for r in result["models"] + result.get("pyhpc", []) + result["ops"]
        if "error" not in r
    ]
    if bench._chart(chart_rows, opts.out / f"{stem}.png"):
        print(f"chart: {opts.out / f'{stem}.png'}")
    return 0


def _allocator(malloc: str) -> str:
    """The allocator settings of a run, as the header shows them."""
    from tools import bench_alloc

    env = bench_alloc.environment(malloc, {})
    settings = ", ".join(f"{key}={value}" for key, value in sorted(env.items()))
    return settings or "glibc's default malloc"


def _header(opts, result) -> str:
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    models = [r for r in result["models"] if "error" not in r]
    by_threads: dict[int, list[float]] = {}
    for r in models:
        by_threads.setdefault(r["threads"], []).append(r["patched_over_stock"])
    geo = "; ".join(
        f"{t} thread(s) {geomean(v):.3f}" for t, v in sorted(by_threads.items())
    )
    commits = ", ".join(
        f"{f} @ {c[:12]}" for f, c in UPSTREAM_OPERATOR_BENCHMARKS.items()
    )
    return (
        f"torch {result['torch']}, {platform.machine()}, {os.cpu_count()} cores, "
        f"{stamp}{' (--quick)' if opts.quick else ''}; "
        + _allocator(opts.malloc)
        + "; "
        f"medians of {opts.reps} interleaved reps (ops and pyhpc over "
        f"{bench.INPUT_COPIES} staggered "
        f"input copies, models over {MODEL_INPUT_COPIES}); ratios are medians of "
        "per-repetition ratios"
        + (
            f", then the median of {result['processes']} processes (their range)"
            if result.get("processes", 1) > 1
            else ""
        )
        + f". Models: patched/stock geomean {geo or 'n/a'}. "
        f"Upstream operator benchmarks read at pytorch/pytorch {commits}. "
        f"CPU pressure (start / end): {' | '.join(result['cpu_pressure'])}"
        + (" PARTIAL: the run was cut short." if result.get("partial") else "")
    )


if __name__ == "__main__":
    sys.exit(main())
