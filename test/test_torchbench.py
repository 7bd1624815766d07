"""tools/torchbench.py and bench-models' pyhpc suite, on a fake checkout
laid out as pytorch/benchmark's (no TorchBench here, no timing)."""

from __future__ import annotations

import argparse
import textwrap

import pytest
import torch

from tools import bench_models as bm
from tools import torchbench

# A model package as TorchBench writes one: relative imports of the harness,
# numpy float64 inputs, a kernel module beside it.
MODEL_INIT = """
import numpy as np
import torch
from torchbenchmark.tasks import OTHER
from ...util.model import BenchmarkModel
from . import kernel

class Scale(torch.nn.Module):
    def forward(self, x, k):
        return kernel.step(x, k), x.sum(-1)

class Model(BenchmarkModel):
    task = OTHER.OTHER_TASKS
    DEFAULT_EVAL_BSIZE = 64

    def __init__(self, test, device, batch_size=None, extra_args=[]):
        super().__init__(test=test, device=device, batch_size=batch_size,
                         extra_args=extra_args)
        np.random.seed(0)
        self.model = Scale()
        self.example_inputs = (
            torch.from_numpy(np.random.randn(self.batch_size, 8)),
            torch.arange(8),
        )

    def get_module(self):
        return self.model, self.example_inputs
"""
KERNEL = """
def step(x, k):
    return (x * 1.5 + k).exp() / (1 + x * x)
"""


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    models = tmp_path / "torchbenchmark" / "models"
    for name in torchbench.PYHPC:
        (models / name).mkdir(parents=True)
        (models / name / "__init__.py").write_text(textwrap.dedent(MODEL_INIT))
        (models / name / "kernel.py").write_text(KERNEL)
    monkeypatch.setenv("TORCHBENCH_SRC", str(tmp_path))
    return tmp_path


def test_a_missing_or_wrong_checkout_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHBENCH_SRC", raising=False)
    with pytest.raises(torchbench.TorchBenchError, match="TORCHBENCH_SRC"):
        torchbench.checkout()
    with pytest.raises(torchbench.TorchBenchError, match="not a pytorch/benchmark"):
        torchbench.checkout(tmp_path)


def test_bench_models_refuses_the_pyhpc_suite_without_a_checkout(monkeypatch, capsys):
    monkeypatch.delenv("TORCHBENCH_SRC", raising=False)
    with pytest.raises(SystemExit) as exit_:
        bm.main(["--suite", "pyhpc"])
    assert exit_.value.code == 2 and "TORCHBENCH_SRC" in capsys.readouterr().err


def test_a_model_loads_with_the_harness_stood_in(checkout):
    loaded = torchbench.load(torchbench.PYHPC[0], torchbench.checkout())
    x, k = loaded.inputs
    assert x.shape == (64, 8) and x.dtype == torch.float64  # DEFAULT_EVAL_BSIZE
    cast = torchbench.cast_floats(loaded.inputs, torch.float32)
    assert cast[0].dtype == torch.float32 and cast[1].dtype == torch.int64


def test_relative_error_is_scaled_by_the_reference_and_catches_nonfinite():
    ref = (torch.tensor([100.0, -50.0], dtype=torch.float64), torch.tensor([1.0]))
    out = (torch.tensor([100.0, -49.0]), torch.tensor([1.0]))
    assert torchbench.relative_error(out, ref) == pytest.approx(0.01)
    bad = (torch.tensor([float("nan"), -50.0]), torch.tensor([1.0]))
    assert torchbench.relative_error(bad, ref) == float("inf")
    # where eager float32 is non-finite itself, nothing is compared
    zero_times_inf = (torch.tensor([float("nan"), 2.2]),)
    eager_finite = [torch.tensor([False, True])]
    assert torchbench.relative_error(
        zero_times_inf, (torch.tensor([0.0, 2.0], dtype=torch.float64),), eager_finite
    ) == pytest.approx(0.1)
    # beyond float32's range the reference overflows in every variant alike
    huge = (torch.tensor([1e300, 2.0], dtype=torch.float64),)
    assert torchbench.relative_error((torch.tensor([float("inf"), 2.2]),), huge) == (
        pytest.approx(0.1)
    )


def test_the_check_fails_a_variant_far_less_accurate_than_eager(checkout):
    check = torchbench.pyhpc_check("equation_of_state")
    loaded = torchbench.load(torchbench.PYHPC[0], torchbench.checkout())
    args = torchbench.cast_floats(loaded.inputs, torch.float32)
    module = loaded.module

    def off(x, k):
        a, b = module(x, k)
        return a * 1.01, b

    good = check({"eager": module, "stock": module, "patched": module}, args)
    assert good["f64_check"] == "ok" and good["patched_f64_error"] < 1e-5
    bad = check({"eager": module, "stock": module, "patched": off}, args)
    assert bad["f64_check"] == "FAIL" and bad["patched_f64_error"] > 5e-3


def options(**kw):
    defaults = dict(reps=2, copy_gbs=10.0, quick=True, only="equation_of_state")
    opts = argparse.Namespace(**{**defaults, **kw})
    opts.partial, opts.save_partial = {}, lambda: None
    return opts


def test_pyhpc_rows_carry_nests_ratios_and_the_float64_check(checkout):
    (row,) = bm.run_pyhpc(options(), threads=[1])
    assert "error" not in row, row.get("error")
    assert row["workload"] == "equation_of_state"
    assert row["f64_check"] == "ok"
    assert row["stock_nests"] >= 1 and row["patched_nests"] >= 1
    assert row["patched_over_stock"] > 0 and row["roofline"] > 0
    text = bm.markdown({"header": "h", "models": [], "ops": [], "pyhpc": [row]})
    (line,) = [l for l in text.splitlines() if l.startswith("| equation_of_state")]
    assert "| ok |" in line


def test_processes_merge_into_median_ratios_with_their_range():
    def run(ratio):
        row = {"workload": "m", "threads": 1, "stock_over_eager": 1.0,
               "patched_over_eager": ratio, "patched_over_stock": ratio}  # fmt: skip
        return {"models": [], "ops": [], "pyhpc": [row], "torch": "t"}

    merged = bm.merge_processes([run(0.9), run(1.2), run(1.0)])
    (row,) = merged["pyhpc"]
    assert merged["processes"] == 3
    assert row["patched_over_stock"] == 1.0
    assert row["patched_over_stock_range"] == (0.9, 1.2)
    assert bm._fmt_ratio(row, "patched_over_stock") == "1.00 (0.90-1.20)"
