"""Compile a fixed corpus of small programs and dump their generated code.

    python tools/corpus_codegen.py --out dump.json [--only NAME ...]

The flags-off test runs this once under stock torch 2.13.0 and once under the
patched tree with both overlay flags off, then compares the dumps program by
program. Each program is also checked against eager, so the corpus doubles as
a numerical sanity check. It imports nothing from this repo, because the
stock venv does not have it installed.
"""

from __future__ import annotations

import os

# Two shared cores: a compile worker pool only adds start-up time here.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

ROWS, COLS = 32, 64  # small on purpose: every program costs one compile


@dataclass
class Case:
    fn: Callable
    args: tuple
    config: dict = field(default_factory=dict)  # torch._inductor.config patches
    tol: float = 1e-4


PROGRAMS: dict[str, Callable[[], Case]] = {}


def program(builder: Callable[[], Case]) -> Callable[[], Case]:
    PROGRAMS[builder.__name__] = builder
    return builder


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial affine parameters, so a dropped weight or bias shows up."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_()
    return module.eval()


def rows(dtype=torch.float32):
    return torch.randn(ROWS, COLS, dtype=dtype)


@program
def layer_norm():
    return Case(randomized(torch.nn.LayerNorm(COLS)), (rows(),))


@program
def layer_norm_bf16():
    norm = randomized(torch.nn.LayerNorm(COLS)).to(torch.bfloat16)
    return Case(norm, (rows(torch.bfloat16),), tol=5e-2)


@program
def group_norm_seed():
    # The seed of the project: the outer-loop fusion of this GroupNorm falls
    # back on stock 2.13.0 when every intermediate is realized.
    config = {"realize_opcount_threshold": 1, "inplace_buffers": False}
    x = torch.randn(2, 16, 32, 32)
    return Case(randomized(torch.nn.GroupNorm(2, 16)), (x,), config)


@program
def group_norm():
    return Case(randomized(torch.nn.GroupNorm(4, 16)), (torch.randn(2, 16, 8, 8),))


@program
def softmax():
    return Case(lambda x: torch.softmax(x, dim=-1), (rows(),))


@program
def softmax_dim0():
    return Case(lambda x: torch.softmax(x, dim=0), (rows(),))


@program
def log_softmax():
    return Case(lambda x: torch.log_softmax(x, dim=-1), (rows(),))


@program
def rms_norm():
    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    return Case(rms, (rows(), torch.randn(COLS)))


@program
def sum_rows():
    return Case(lambda x: x.sum(dim=1), (rows(),))


@program
def mean_cols():
    return Case(lambda x: x.mean(dim=0), (rows(),))


@program
def amax_rows():
    return Case(lambda x: x.amax(dim=-1), (rows(),))


@program
def var_mean_rows():
    return Case(lambda x: torch.var_mean(x, dim=-1), (rows(),))


@program
def permute_add():
    return Case(lambda x, y: x.permute(1, 0) + y, (rows(), torch.randn(COLS, ROWS)))


@program
def transpose_sum():
    return Case(lambda x, y: (x.t() * y).sum(dim=-1), (rows(), torch.randn(COLS, ROWS)))


@program
def avg_pool_relu_channels_last():
    x = torch.randn(2, 16, 8, 8).to(memory_format=torch.channels_last)
    return Case(lambda x: F.relu(F.avg_pool2d(x, 2)), (x,))


@program
def max_pool2d():
    return Case(
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1), (torch.randn(2, 8, 16, 16),)
    )


@program
def bias_gelu_layer_norm():
    def block(x, bias, weight, beta):
        return F.layer_norm(F.gelu(x + bias), (COLS,), weight, beta)

    return Case(
        block, (rows(), torch.randn(COLS), torch.randn(COLS), torch.randn(COLS))
    )


@program
def cat_sin_cos():
    return Case(lambda x, y: torch.cat([x.sin(), y.cos()], dim=1), (rows(), rows()))


@program
def strided_slices():
    return Case(lambda x: x[:, ::2] + x[:, 1::2] * x[:, : COLS // 2], (rows(),))


@program
def layer_norm_odd_width():
    # 50 columns: vector body plus a masked tail, where tilings can disagree.
    return Case(randomized(torch.nn.LayerNorm(50)), (torch.randn(30, 50),))


@program
def group_norm_channels_last():
    x = torch.randn(2, 16, 8, 8).to(memory_format=torch.channels_last)
    return Case(randomized(torch.nn.GroupNorm(4, 16)), (x,))


@program
def batch_norm_train():
    def bn(x, weight, bias):
        return F.batch_norm(x, None, None, weight, bias, training=True)

    return Case(bn, (torch.randn(4, 16, 8, 8), torch.randn(16), torch.randn(16)))


@program
def center_columns():
    return Case(lambda x: x - x.mean(dim=0, keepdim=True), (rows(),))


@program
def softmax_bf16():
    return Case(lambda x: torch.softmax(x, dim=-1), (rows(torch.bfloat16),), tol=2e-2)


# --------------------------------------------------------------------------


def normalize_code(code: str) -> str:
    """Drop what depends on the machine or run rather than on codegen."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    replacements = {cache_dir(): "<cache>", sys.prefix: "<prefix>"}
    lines = [
        ln for ln in code.splitlines() if not ln.startswith("Output code written to:")
    ]
    text = "\n".join(lines)
    for old, new in replacements.items():
        text = text.replace(old, new)
    return text


def outputs_close(expected, actual, tol: float) -> tuple[bool, float]:
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    if len(expected) != len(actual):
        return False, float("inf")
    ok, worst = True, 0.0
    for e, a in zip(expected, actual):
        ok &= (
            e.shape == a.shape
            and e.dtype == a.dtype
            and torch.allclose(e, a, atol=tol, rtol=tol)
        )
        worst = max(
            worst,
            (e.float() - a.float()).abs().max().item()
            if e.shape == a.shape
            else float("inf"),
        )
    return ok, worst


def run_case(name: str) -> dict:
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_cpp_code

    torch.manual_seed(0)
    case = PROGRAMS[name]()
    started = time.perf_counter()
    with torch.no_grad(), inductor_config.patch(case.config):
        expected = case.fn(*case.args)
        compiled = torch.compile(case.fn, fullgraph=True)
        actual, code = run_and_get_cpp_code(compiled, *case.args)  # resets dynamo first
    ok, max_abs_err = outputs_close(expected, actual, case.tol)
    return {
        "code": normalize_code(code),
        "allclose": ok,
        "max_abs_err": max_abs_err,
        "compile_s": round(time.perf_counter() - started, 2),
    }


def overlay_flags() -> dict | None:
    """The overlay's switches as this interpreter sees them; None on stock torch."""
    from torch._inductor import config as inductor_config

    from fusion_overlay.flags import NAMES

    if not all(hasattr(inductor_config.cpp, n) for n in NAMES):
        return None
    return {n: getattr(inductor_config.cpp, n) for n in NAMES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="where to write the JSON dump")
    parser.add_argument("--only", nargs="*", choices=sorted(PROGRAMS), help="a subset")
    args = parser.parse_args(argv)

    results = {}
    for name in args.only or PROGRAMS:
        try:
            results[name] = run_case(name)
        except Exception:  # one broken program must not hide the others
            results[name] = {"error": traceback.format_exc(limit=8)}
        print(
            f"{name}: {results[name].get('compile_s', 'ERROR')}",
            file=sys.stderr,
            flush=True,
        )
    dump = {
        "python": sys.executable,
        "torch_version": torch.__version__,
        "overlay_flags": overlay_flags(),
        "programs": results,
    }
    with open(args.out, "w") as handle:
        json.dump(dump, handle, indent=1)
    return 0


if __name__ == "__main__":
    # Run as a script by the test (under either venv): make tools/ importable.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
