"""make bench-models: shape capture and the harness, on tiny models (no timing)."""

from __future__ import annotations

import argparse

import pytest
import torch
import torch.nn.functional as F

from tools import bench_models as bm
from compile_utils import vector_lanes


class Tiny(torch.nn.Module):
    """One of each pattern the capture reads, at small shapes."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.gn = torch.nn.GroupNorm(4, 8)
        self.channels_ln = torch.nn.LayerNorm(8)

    def forward(self, tokens, image):
        h = self.ln(self.proj(tokens))
        scores = torch.softmax(h @ h.transpose(-1, -2), dim=-1)
        variance = h.pow(2).mean(-1, keepdim=True)  # LlamaRMSNorm
        rms = h * torch.rsqrt(variance + 1e-6)
        g = F.silu(self.gn(image))
        c = self.channels_ln(
            image.permute(0, 2, 3, 1)
        )  # ConvNeXt's channels-first norm
        pooled = image.mean([-2, -1])  # ConvNeXt's pooling
        tokens_pooled = F.adaptive_avg_pool1d(h.transpose(1, 2), 1)  # Swin's
        return scores, rms, g, c, F.log_softmax(image, dim=1), pooled, tokens_pooled


def tiny_inputs():
    return torch.randn(2, 5, 16), torch.randn(2, 8, 6, 6)


def test_capture_reads_every_pattern_with_its_shape_layout_and_parameter():
    cases = bm.capture_cases(Tiny().eval(), tiny_inputs())
    assert {(c.kind, c.shape, c.order, c.param) for c in cases} == {
        ("layer_norm", (2, 5, 16), (0, 1, 2), (16,)),
        ("softmax", (2, 5, 5), (0, 1, 2), (2,)),
        ("rms_norm", (2, 5, 16), (0, 1, 2), (2,)),
        ("group_norm_silu", (2, 8, 6, 6), (0, 1, 2, 3), (4,)),
        ("layer_norm", (2, 6, 6, 8), (0, 3, 1, 2), (8,)),
        ("log_softmax", (2, 8, 6, 6), (0, 1, 2, 3), (1,)),
        ("mean", (2, 8, 6, 6), (0, 1, 2, 3), (2, 3)),
        ("mean", (2, 16, 5), (0, 2, 1), (2,)),  # over tokens, a stride apart
    }


def test_replayed_inputs_have_the_captured_layout():
    image = torch.randn(2, 8, 6, 6).permute(0, 2, 3, 1)
    case = bm.OpCase("layer_norm", tuple(image.shape), bm._stride_order(image), (8,))
    replay = bm._replay_input(case)
    assert replay.shape == image.shape and replay.stride() == image.stride()
    assert case.name == "layer_norm(8)_2x6x6x8_perm0312"


def test_size_one_dims_do_not_make_a_contiguous_tensor_look_permuted():
    assert bm._stride_order(torch.empty(1, 12, 32, 32)) == (0, 1, 2, 3)
    assert bm._stride_order(torch.empty(4, 1, 8)) == (0, 1, 2)


def test_replayed_rms_norm_is_llamas():
    case = bm.OpCase("rms_norm", (3, 7, 16), (0, 1, 2), (2,))
    fn, x = bm.op_fn(case), bm._replay_input(case)
    expected = fn.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    torch.testing.assert_close(fn(x), expected)


def two_tiny_specs():
    def build(quick, attn=None):
        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)
        ).eval(), (torch.randn(4, 16),)

    return (
        bm.ModelSpec("a", "test", build, "tiny a"),
        bm.ModelSpec("b", "test", build, "tiny b", timed=False),
    )


def test_cases_shared_by_models_are_measured_once_with_every_source(monkeypatch):
    monkeypatch.setattr(bm, "MODELS", two_tiny_specs())
    found = bm.model_cases(quick=True, only=set())
    assert list(found.values()) == [["a", "b"]]
    (case,) = found
    assert (case.kind, case.shape) == ("layer_norm", (4, 16))


def test_upstream_cases_keep_upstreams_dims():
    cases = bm.upstream_cases(quick=False)
    softmax = [c for c in cases if c.kind in ("softmax", "log_softmax")]
    assert all(c.param == (1,) for c in softmax if len(c.shape) == 4)
    assert bm.OpCase("log_softmax", (700, 23258), (0, 1), (0,)) in cases
    assert bm.OpCase("group_norm", (32, 8, 56, 56), (0, 1, 2, 3), (4,)) in cases
    layernorm = bm.OpCase("layer_norm", (64, 128, 56, 56), (0, 1, 2, 3), (128, 56, 56))
    assert layernorm in cases
    assert bm.OpCase("sum", (8192, 1024), (0, 1), (0,)) in cases
    assert bm.OpCase("sum", (1024, 8192), (0, 1), (1,)) in cases


def options(**kw):
    defaults = {
        "quick": True,
        "only": "",
        "reps": 2,
        "copy_gbs": 1.0,
        "profile": False,
        "partial": {},
        "save_partial": lambda: None,
    }
    return argparse.Namespace(**{**defaults, **kw})


def test_model_rows_compile_both_variants_and_count_their_nests(monkeypatch):
    monkeypatch.setattr(bm, "MODELS", two_tiny_specs())
    (row,) = bm.run_models(options(), threads=[1])
    assert "error" not in row
    assert row["workload"] == "a" and row["note"].endswith("tiny a")  # b: capture only
    # LayerNorm fused; without vectors no tiling keeps stock's apart either
    fused = (4, 1) if vector_lanes() else (1, 1)
    assert (row["stock_nests"], row["patched_nests"]) == fused
    for key in ("stock_over_eager", "patched_over_eager", "patched_over_stock"):
        assert row[key] > 0


def test_a_model_that_breaks_its_graph_is_an_error_row(monkeypatch):
    # Frames resumed after a graph break are cached on the model's own code
    # objects, shared by stock and patched: such a model is refused.
    class Breaks(torch.nn.Module):
        def forward(self, x):
            torch._dynamo.graph_break()
            return x.softmax(-1)

    spec = bm.ModelSpec(
        "breaks", "test", lambda quick: (Breaks(), (torch.randn(4, 8),)), ""
    )
    monkeypatch.setattr(bm, "MODELS", (spec,))
    (row,) = bm.run_models(options(), threads=[1])
    assert "error" in row and "graph_break" in row["error"].lower().replace(" ", "_")


def test_the_report_shows_the_compiled_call_floor_beside_tiny_cases_only():
    def row(name, eager_ms, **extra):
        return {
            **extra,
            "workload": name,
            "threads": 1,
            "sources": ["x"],
            "eager_median_ms": eager_ms,
            "stock_median_ms": 1.0,
            "patched_median_ms": 0.02,
            "stock_over_eager": 1.0,
            "patched_over_eager": 1.0,
            "patched_over_stock": 1.0,
            "stock_nests": 1,
            "patched_nests": 1,
        }

    result = {
        "header": "h",
        "models": [],
        "ops": [
            row("compiled_call_floor", 0.003),
            row("tiny", 0.01),
            row(
                "big",
                5.0,
                patched_generated_over_eager=0.8,
                patched_call_layers_median_ms=0.05,
            ),
        ],
    }
    text = bm.markdown(result)
    cells = {
        line.split(" | ")[0].strip("| "): [c.strip() for c in line.split("|")[1:-1]]
        for line in text.splitlines()
    }
    header = cells["case"]
    floor = header.index("compiled-call floor ms")
    assert cells["tiny"][floor] == "0.020" and cells["big"][floor] == ""
    generated = header.index("patched generated code / eager")
    layers = header.index("patched call layers ms")
    assert (cells["big"][generated], cells["big"][layers]) == ("0.80", "0.050")
    assert (cells["tiny"][generated], cells["tiny"][layers]) == ("-", "-")


@pytest.mark.parametrize(
    "kind",
    [
        "group_norm",
        "group_norm_silu",
        "instance_norm",
        "softmax",
        "log_softmax",
        "layer_norm",
    ],
)
def test_every_kind_replays(kind):
    param = {
        "group_norm": (2,),
        "group_norm_silu": (2,),
        "instance_norm": (),
        "softmax": (1,),
        "log_softmax": (1,),
        "layer_norm": (4, 4),
    }[kind]
    case = bm.OpCase(kind, (2, 4, 4, 4), (0, 1, 2, 3), param)
    workload = bm.op_workload(case)
    fn, (x,), min_bytes = workload.make()
    assert fn(x).shape == x.shape and min_bytes == 2 * x.numel() * 4


@pytest.mark.parametrize("kind", bm.REDUCTIONS)
def test_every_reduction_replays(kind):
    case = bm.OpCase(kind, (2, 4, 6), (0, 2, 1), (1,))
    fn, (x,), min_bytes = bm.op_workload(case).make()
    assert x.stride() == (24, 1, 4) and fn(x).shape == (2, 6)
    assert min_bytes == (x.numel() + 12) * 4


def test_instance_norm_replays_at_upstreams_3d_shape():
    case = bm.OpCase("instance_norm", (32, 8, 16), (0, 1, 2), ())
    fn, (x,), _ = bm.op_workload(case).make()
    assert fn(x).shape == (32, 8, 16)


@pytest.mark.parametrize("malloc", ["tuned", "default"])
def test_the_suites_run_under_the_chosen_allocator(monkeypatch, tmp_path, malloc):
    import types

    from tools import bench

    seen = {}

    def run(args, env):
        seen.update(env)
        (tmp_path / "out.json").write_text("{}")
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(bm.subprocess, "run", run)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.perturb=1")
    opts = argparse.Namespace(
        suite="ops", threads="1", reps=1, only="", quick=False, profile=False,
        malloc=malloc,
    )  # fmt: skip
    bm._run_child(opts, tmp_path / "out.json")
    expected = {"tuned": bench.NO_PAGE_FAULT_TUNABLES, "default": None}[malloc]
    assert seen.get("GLIBC_TUNABLES") == expected
    assert bm._allocator(malloc) == (
        "glibc's default malloc"
        if malloc == "default"
        else f"GLIBC_TUNABLES={bench.NO_PAGE_FAULT_TUNABLES}"
    )
