"""The fuzz check: eager vs compiled with the overlay flags off vs on.

``check_case`` runs the program eagerly, compiles it fresh twice under the
case's config variant (``compile_utils.compile_and_run``: flags off, then on)
and classifies the outcome:

``ok``      both compiled runs agree with eager, and with each other;
``ours``    the overlay's fault: flags on crashes where flags off does not,
            or flags on differs from flags off beyond the tight tolerance and
            is less accurate than flags off against a float64 reference run
            (see ``_classify``), or returns another shape or dtype, while
            flags off agrees with eager;
``stock``   stock is wrong too (flags off crashes or disagrees with eager and
            with the float64 reference): an upstream bug, reported apart;
``noise``   flags on differs from flags off (or misses the eager tolerance)
            but is as accurate as flags off: a changed summation order in an
            ill-conditioned program, not a failure;
``invalid`` eager itself raises or produces inf/nan: not a test case.

Tolerances are relative to each output's magnitude: ``atol = tol * max(1,
max|expected|)`` and ``rtol = tol``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import sys
import time
import warnings
from pathlib import Path

import torch

from . import reach, same_kernels
from .program import CONFIGS, FuzzCase

REPO_ROOT = Path(__file__).resolve().parents[2]
# 0014 prefetches rows of a page or less on every CPU but AMD's
# (costs.prefetches_short_rows): the fuzzed programs take its code, and
# reach the same branches, whatever CPU runs them
os.environ.setdefault("TORCHINDUCTOR_CPP_PREFETCH_SHORT_ROWS", "1")
# 0013 streams only into memory the allocator keeps between calls
# (costs.allocator_maps_fresh_pages): the fuzzer takes that answer on every
# host, whatever allocator runs it
os.environ.setdefault("TORCHINDUCTOR_CPP_FRESH_PAGES", "0")
if str(REPO_ROOT / "test") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "test"))  # compile_utils lives with the tests

import compile_utils

# (eager vs compiled, flags on vs flags off), relative to magnitude.  Both
# compiled runs compute half-precision ops in float32 and round the same
# buffers, so they agree far more tightly than either agrees with eager.
TOLERANCE = {
    "float32": (1e-4, 1e-5),
    "low_precision": (3e-2, 1e-2),
}


def tolerances(case: FuzzCase) -> tuple[float, float]:
    return TOLERANCE["low_precision" if case.low_precision else "float32"]


@dataclasses.dataclass
class Comparison:
    ok: bool
    worst: float  # largest error in units of the tolerance (> 1 fails)
    detail: str = ""


def compare(got: tuple, want: tuple, tol: float) -> Comparison:
    """Every output within ``tol`` of the reference, relative to its magnitude."""
    if len(got) != len(want):
        return Comparison(
            False, float("inf"), f"{len(got)} outputs, expected {len(want)}"
        )
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            detail = (
                f"output {i}: {_dtype(g)}{list(g.shape)}, "
                f"expected {_dtype(w)}{list(w.shape)}"
            )
            return Comparison(False, float("inf"), detail)
        g64, w64 = g.double(), w.double()
        nan_mismatch = bool((g64.isnan() != w64.isnan()).any())
        scale = max(1.0, float(w64.nan_to_num(0.0).abs().max()) if w64.numel() else 1.0)
        allowed = tol * scale + tol * w64.abs()
        excess = ((g64 - w64).abs() / allowed).nan_to_num(0.0, posinf=float("inf"))
        both_inf = (g64 == w64) & g64.isinf()
        ratio = (
            float(excess.masked_fill(both_inf, 0.0).max()) if excess.numel() else 0.0
        )
        if nan_mismatch:
            ratio = float("inf")
        worst = max(worst, ratio)
        if ratio > 1.0:
            diff = (g64 - w64).abs().nan_to_num(float("inf"))
            flat = int(diff.argmax())
            index = (
                list(torch.unravel_index(torch.tensor(flat), w.shape))
                if w.dim()
                else []
            )
            at = tuple(int(i) for i in index)
            detail = (
                f"output {i} {_dtype(w)}{list(w.shape)}: "
                f"max |diff| {float(diff.max()):.3g} at "
                f"{at} (got {float(g64.flatten()[flat]):.6g}, expected "
                f"{float(w64.flatten()[flat]):.6g}), {ratio:.3g}x the tolerance "
                f"(tol {tol:g}, magnitude {scale:.3g})"
            )
            return Comparison(False, worst, detail)
    return Comparison(True, worst)


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


@dataclasses.dataclass
class CheckResult:
    status: str  # ok | ours | stock | noise | invalid
    kind: str = ""  # short description of the failure
    message: str = ""
    stats: dict = dataclasses.field(default_factory=dict)
    # the program to write as the repro, when not the checked one: a batch's
    # failure that its member does not show alone
    repro: FuzzCase | None = None

    @property
    def failed(self) -> bool:
        return self.status == "ours"

    @property
    def crashed(self) -> bool:
        return self.kind.startswith("crash")


def case_config(case: FuzzCase, overlay: bool) -> dict:
    """The config the case compiles under, with the overlay flags on or off."""
    extra = dict(CONFIGS[case.config])
    if case.threads:
        extra["cpp.threads"] = case.threads
    if overlay and case.flags == "shipped":
        extra.update(compile_utils.SHIPPED_DEFAULTS)
    if overlay and case.flags.startswith("without:"):
        extra[f"cpp.{case.flags.removeprefix('without:')}"] = False
    return extra


# The overlay's bound under which a graph gets stock's answers from the
# speculative analyses (cpp_fusion/speculation.py).  The fuzzer's programs
# are small on purpose, so they speculate everywhere (bound 0), but for the
# cases compiled with the shipped defaults, which keep the shipped bound.
SPECULATION_ENV = "TORCHINDUCTOR_CPP_SPECULATION_MIN_BYTES"
SPECULATE_EVERYWHERE_ENV = {SPECULATION_ENV: "0"}


@contextlib.contextmanager
def _speculation_bound(case: FuzzCase):
    old = os.environ.pop(SPECULATION_ENV, None)
    if case.flags != "shipped":
        os.environ.update(SPECULATE_EVERYWHERE_ENV)
    try:
        yield
    finally:
        os.environ.pop(SPECULATION_ENV, None)
        if old is not None:
            os.environ[SPECULATION_ENV] = old


@contextlib.contextmanager
def _cache_size(case: FuzzCase):
    """The case's last-level cache size for 0013/0014 (read once per process)."""
    if not case.cache_bytes:
        yield
        return
    try:
        from torch._inductor.codegen.cpp_fusion import costs as costs
    except ImportError:  # stock torch: nothing reads it
        yield
        return
    old = os.environ.get(costs.CACHE_BYTES_ENV)
    os.environ[costs.CACHE_BYTES_ENV] = str(case.cache_bytes)
    costs.last_level_cache_bytes.cache_clear()
    try:
        yield
    finally:
        if old is None:
            del os.environ[costs.CACHE_BYTES_ENV]
        else:
            os.environ[costs.CACHE_BYTES_ENV] = old
        costs.last_level_cache_bytes.cache_clear()


def _compile(case: FuzzCase, fn, args, overlay: bool):
    """(outputs, Compiled, seconds, reach), or what compiling/running raised.

    ``reach``: per overlay feature, the decisions that changed a kernel.
    """
    reach.install()
    reach.reset()
    same_kernels.install()
    start = time.perf_counter()
    try:
        with (
            _cache_size(case),
            _speculation_bound(case),
            same_kernels.reuse() if overlay else same_kernels.record(),
        ):
            outputs, compiled = compile_utils.compile_and_run(
                fn,
                args,
                overlay=overlay,
                dynamic=case.dynamic,
                extra_config=case_config(case, overlay),
                keep_compiled_modules=True,  # the run's cache: runner.py
            )
    except Exception as exc:  # noqa: BLE001 - any crash is a finding
        return exc
    return outputs, compiled, time.perf_counter() - start, reach.counts()


# A directory of flags-off results kept across the runs of one campaign
# (the mutant runner sets it: every mutant replays the control's programs,
# whose flags-off compile the mutated overlay never enters).  A program's
# flags-off outputs and structure are computed once and loaded after.
FLAGS_OFF_STORE_ENV = "FUZZ_FLAGS_OFF_STORE"


def _compile_off(case: FuzzCase, fn, args, key: str):
    """``_compile(..., overlay=False)``, through the flags-off store if set;
    ``key`` names the program and its input values."""
    store = os.environ.get(FLAGS_OFF_STORE_ENV)
    if not store:
        return _compile(case, fn, args, overlay=False)
    path = Path(store) / f"{key}.pt"
    if path.exists():
        try:
            return torch.load(path, weights_only=False)
        except Exception:  # noqa: BLE001 - a partial file: compile again
            pass
    result = _compile(case, fn, args, overlay=False)
    if not isinstance(result, Exception):  # a crash is compiled again, cheaply
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(result, partial)
        partial.replace(path)
    return result


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first[:300]}"


def check_case(case: FuzzCase) -> CheckResult:
    """Every run gets fresh inputs: programs with in-place ops mutate them."""
    fn = case.build()
    warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")
    expected = _eager(case, fn)
    if isinstance(expected, CheckResult):
        return expected
    off = _compile_off(case, fn, case.make_inputs(), case.digest())
    on = _compile(case, fn, case.make_inputs(), overlay=True)
    stats = _stats(off, on)
    if isinstance(off, Exception) or isinstance(on, Exception):
        if isinstance(on, Exception) and not isinstance(off, Exception):
            return CheckResult("ours", "crash with flags on", _describe(on), stats)
        if isinstance(off, Exception) and isinstance(on, Exception):
            return CheckResult(
                "stock", "crash with flags on and off", _describe(off), stats
            )
        return CheckResult("stock", "crash with flags off only", _describe(off), stats)

    reference = _reference64(fn, case.make_inputs())
    return _classify(case, expected, reference, off[0], on[0], stats)


# --- batches ------------------------------------------------------------------
#
# A batch is several independent programs that share how they compile
# (config, dynamic, flags, threads, cache size), compiled as one graph: one
# Dynamo trace, one Inductor lowering, one C++ module and one g++ call per
# flag setting instead of one per program.  The programs share no tensor, so
# the scheduler has nothing to fuse between them (a fusion needs shared data);
# every program's outputs are compared on their own.

BATCH_SHARED = ("dynamic", "config", "flags", "threads", "cache_bytes")


def batch_key(case: FuzzCase) -> tuple:
    """Cases with the same key can share a batch (a case ``alone`` shares
    none)."""
    shared = tuple(getattr(case, name) for name in BATCH_SHARED)
    return (*shared, case.source) if case.alone else shared


def batch_case(cases) -> FuzzCase:
    """The programs as one: ``program`` calls ``program_0``, ``program_1``...
    on its slices of the inputs and returns all their outputs.  A repro of a
    failure that only shows in the batch."""
    from .program import SOURCE_HEADER

    defs: list[str] = []
    calls: list[str] = []
    inputs: list = []
    for i, case in enumerate(cases):
        body = case.source.removeprefix(SOURCE_HEADER)
        defs.append(body.replace("def program(", f"def program_{i}(", 1).strip())
        names = [f"a{len(inputs) + j}" for j in range(len(case.inputs))]
        inputs.extend(case.inputs)
        calls.append(f"*program_{i}({', '.join(names)})")
    args = ", ".join(f"a{j}" for j in range(len(inputs)))
    source = "\n\n".join(
        [SOURCE_HEADER.rstrip("\n"), *defs, f"def program({args}):\n"
         f"    return ({', '.join(calls)},)"]
    ) + "\n"  # fmt: skip
    first = cases[0]
    return dataclasses.replace(
        first,
        source=source,
        inputs=tuple(inputs),
        kinds=tuple(k for case in cases for k in case.kinds),
    )


def _batch_inputs(cases) -> list[torch.Tensor]:
    """Every member's own inputs: a member sees the values it sees alone."""
    return [t for case in cases for t in case.make_inputs()]


def _eager(case: FuzzCase, fn) -> tuple | CheckResult:
    """The eager outputs (cloned), or the ``invalid`` result."""
    try:
        with torch.no_grad():
            out = fn(*case.make_inputs())
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            expected = tuple(t.clone() for t in out)  # an output may be an input
    except Exception as exc:  # noqa: BLE001
        return CheckResult("invalid", "eager error", _describe(exc))
    if not all(torch.isfinite(t).all() for t in expected):
        return CheckResult("invalid", "eager inf/nan")
    return expected


def check_batch(cases) -> list[CheckResult]:
    """``check_case`` for each of ``cases`` (one ``batch_key``), compiled as
    one graph.  A crash of the batch and every ``ours`` verdict are checked
    again with the program alone: a failure is reported on the smallest
    program that shows it, and one that shows only in the batch is reported
    on the batch (``batch_case``), if the batch fails again as one program.
    Loop-nest and reach statistics are the batch's: they sit on the first
    member's result, the others carry ``batched``."""
    if len(cases) == 1:
        return [check_case(cases[0])]
    assert len({batch_key(c) for c in cases}) == 1, "one compile setting per batch"
    warnings.filterwarnings("ignore", message=".*dynamo_pgo force disabled.*")
    results: list[CheckResult | None] = [None] * len(cases)
    members, expected = [], []
    for i, case in enumerate(cases):
        eager = _eager(case, case.build())
        if isinstance(eager, CheckResult):
            results[i] = eager
        else:
            members.append(i)
            expected.append(eager)
    if len(members) < 2:
        return [r or check_case(case) for r, case in zip(results, cases)]
    valid = [cases[i] for i in members]
    batch = batch_case(valid)
    fn = batch.build()
    key = hashlib.sha256(" ".join(c.digest() for c in valid).encode()).hexdigest()
    off = _compile_off(batch, fn, _batch_inputs(valid), key[:16])
    on = _compile(batch, fn, _batch_inputs(valid), overlay=True)
    if isinstance(off, Exception) or isinstance(on, Exception):
        return [r or check_case(case) for r, case in zip(results, cases)]
    batch_stats = _stats(off, on)
    start = 0
    for n, (i, want) in enumerate(zip(members, expected)):
        case, end = cases[i], start + len(want)
        stats = dict(batch_stats) if n == 0 else {"batched": True}
        stats["batch"] = len(valid)
        reference = _reference64(case.build(), case.make_inputs())
        results[i] = _classify(
            case, want, reference, off[0][start:end], on[0][start:end], stats
        )
        start = end
    checked = [r for r in results if r is not None]  # every one, by now
    return [
        _alone_or_batch(case, batch, r) if r.failed else r
        for r, case in zip(checked, cases)
    ]


def _alone_or_batch(case: FuzzCase, batch: FuzzCase, in_batch: CheckResult):
    """The verdict of ``case`` alone if it fails alone; else the batch's."""
    alone = check_case(case)
    if alone.failed:
        return alone
    again = check_case(batch)
    kind = f"{in_batch.kind} (in a batch only)"
    note = (
        "the member passes alone; the batch as one program "
        + ("fails too: " + again.message if again.failed else "passes")
    )
    return dataclasses.replace(
        in_batch, kind=kind, message=f"{in_batch.message}; {note}",
        stats={**in_batch.stats, "repro_batch": again.failed}, repro=batch,
    )  # fmt: skip


def _reference64(fn, args) -> tuple | None:
    """The program run eagerly in float64: the truth both compiled runs approximate.

    Casts inside the program still round where they say so.
    """
    try:
        with torch.no_grad():
            out = fn(*[a.double() for a in args])
    except Exception:  # noqa: BLE001 - no reference then; eager alone decides
        return None
    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return out if all(torch.isfinite(t).all() for t in out) else None


def deviation(got: tuple, ref: tuple) -> float:
    """Largest |got - ref| of all outputs, relative to each output's magnitude."""
    worst = 0.0
    for g, r in zip(got, ref):
        g64, r64 = g.double(), r.double()
        scale = max(1.0, float(r64.abs().max()) if r64.numel() else 1.0)
        diff = (g64 - r64).abs().nan_to_num(float("inf"))
        worst = max(worst, float(diff.max()) / scale if diff.numel() else 0.0)
    return worst


def _classify(case, expected, ref, off, on, stats) -> CheckResult:
    """Outcome of two compiled runs that did not crash.

    A compiled run *agrees* when it is within the eager tolerance of eager or
    of the float64 reference (eager rounds every op to bfloat16/float16,
    compiled code only its stores).  Flags on is *ours* to blame when it
    differs from flags off beyond the tight tolerance and is also less
    accurate than flags off against the float64 reference (more than twice
    flags off's error plus the tight tolerance): ill-conditioned programs
    (normalizing an almost constant row) amplify a changed summation order,
    which is legitimate, on both sides alike.
    """
    eager_tol, tight_tol = tolerances(case)
    truth = ref if ref is not None else expected

    def agrees(outs) -> Comparison:
        vs_eager = compare(outs, expected, eager_tol)
        if vs_eager.ok or ref is None:
            return vs_eager
        as_ref = tuple(r.to(o.dtype) for r, o in zip(ref, outs))
        if compare(outs, as_ref, eager_tol).ok:
            return Comparison(True, 1.0)
        return vs_eager

    off_ok, on_ok = agrees(off), agrees(on)
    on_vs_off = compare(on, off, tight_tol)
    e_off, e_on = deviation(off, truth), deviation(on, truth)
    stats.update(
        err_on_off=on_vs_off.worst,
        dev_off=e_off,
        dev_on=e_on,
        reference=ref is not None,
    )
    accuracy = (
        f"error against the {'float64 reference' if ref is not None else 'eager'}: "
        f"flags off {e_off:.3g}, flags on {e_on:.3g} (relative to magnitude)"
    )
    if not off_ok.ok:
        note = "" if on_vs_off.ok else f"; flags on differs too: {on_vs_off.detail}"
        return CheckResult(
            "stock", "flags off disagrees with eager", off_ok.detail + note, stats
        )
    if not on_vs_off.ok:
        if _metadata_differs(on, off) or e_on > 2 * e_off + tight_tol:
            eager_note = (
                f"flags on vs eager: {on_ok.detail}"
                if not on_ok.ok
                else "flags on is within the eager tolerance"
            )
            return CheckResult(
                "ours",
                "flags on disagrees with flags off",
                f"{on_vs_off.detail}; {accuracy}; {eager_note}; "
                "flags off agrees with eager",
                stats,
            )
        return CheckResult(
            "noise",
            "flags on differs from flags off, as accurately",
            f"{on_vs_off.detail}; {accuracy}",
            stats,
        )
    if not on_ok.ok:
        return CheckResult(
            "noise", "flags on misses the eager tolerance", on_ok.detail, stats
        )
    return CheckResult("ok", stats=stats)


def _metadata_differs(on, off) -> bool:
    """An output of another count, shape or dtype: never a summation order's
    noise, however accurate its values."""
    return len(on) != len(off) or any(
        a.shape != b.shape or a.dtype != b.dtype for a, b in zip(on, off)
    )


def _stats(off, on) -> dict:
    """Loop structure, compile time and reach of both compiles; read right
    after the flags-on compile (``kernels_reused``: its kernels that took the
    flags-off build, tools/fuzz/same_kernels.py)."""
    stats: dict = {"kernels_reused": same_kernels.reused()}
    for name, result in (("off", off), ("on", on)):
        if isinstance(result, Exception):
            continue
        _, compiled, seconds, reached = result
        stats[f"nests_{name}"] = compiled.total_nests
        stats[f"kernels_{name}"] = len(compiled.nests)
        stats[f"outer_fused_{name}"] = compiled.outer_fused
        stats[f"compile_s_{name}"] = round(seconds, 3)
        if name == "on":
            stats["retiled"] = compiled.retiled
            stats["reordered"] = compiled.reordered
            stats["splits"] = reached["0003"]
            stats["streamed"] = reached["0013"]
            stats["prefetched"] = reached["0014"]
            stats["reach"] = {f: n for f, n in reached.items() if n}
    if not isinstance(off, Exception) and not isinstance(on, Exception):
        stats["code_differs"] = off[1].kernels != on[1].kernels
    return stats


def assert_overlay_agrees(case: FuzzCase) -> CheckResult:
    """The regression-test form of the check (test/regressions/test_fuzz_*.py)."""
    import pytest

    result = check_case(case)
    if result.status == "invalid":
        pytest.fail(f"not a valid case any more: {result.kind}: {result.message}")
    if result.status == "stock":
        pytest.skip(f"stock is wrong here too ({result.kind}): {result.message}")
    assert result.status != "ours", f"{result.kind}: {result.message}\n\n{case.source}"
    return result
