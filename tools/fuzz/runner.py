"""Run the fuzzer: profiles, worker processes, progress line and summary.

``run_fuzz`` starts N worker processes (``python -m tools.fuzz worker``), each
running hypothesis with its own seed over ``strategy.fuzz_cases`` and the
check in ``check.py``.  Workers append JSON records to ``worker<i>.jsonl`` in
the run directory (``build/fuzz/<run>/``); the parent reads them for the
progress line and the summary.  On a failure hypothesis shrinks the program
and the worker writes a repro to ``test/regressions/`` (``repro.py``).

Profiles (hypothesis settings plus strategy size):

``ci``       the seed programs (corpus.py) and 15 generated ones,
             seeded (seed 0 + the worker's slot), no example database;
             what ``make test`` runs (test/test_fuzz.py)
``dev``      until ``--seconds`` (default 300) or ``--examples``; random
             seeds unless given; failures are saved in .hypothesis/ and
             replayed first on the next run
``nightly``  larger programs (up to 10 ops), an hour by default

Every profile checks its programs in batches (``--batch``, default 4):
``check.check_batch`` compiles a batch as one graph and judges every program
on its own.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .reach import FEATURES, TITLES

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "build" / "fuzz"
DEFAULT_CACHE = DEFAULT_OUT / "inductor-cache"
# What the kept Inductor cache may hold after a run (FUZZ_CACHE_BUDGET_BYTES).
CACHE_BUDGET_BYTES = int(os.environ.get("FUZZ_CACHE_BUDGET_BYTES", 4 << 30))
# --streaming: streaming stores (0013) and prefetches (0014) need a kernel
# whose data exceed the last-level cache; with a 64 KiB "cache" the fuzzer's
# small programs qualify.
STREAMING_ENV = {"TORCHINDUCTOR_CPP_STREAMING_CACHE_BYTES": "65536"}

# Workers poison the memory malloc hands out: glibc fills every new block with
# 0x7f bytes (float32 3.4e38, a float16 NaN) and every freed one with 0x80.
# A kernel that reads an element no one wrote then computes with a value that
# cannot pass for data, instead of whatever the process left there before (a
# kill that rests on leftover memory is luck).  Up to the mmap threshold
# raised to its maximum, 32 MiB, every tensor comes from the heap, where the
# fill applies.  Tunables are read at process start, so the worker drops them
# from its environment once running: the C++ compiler it starts is not slowed.
POISON_TUNABLES = "glibc.malloc.perturb=128:glibc.malloc.mmap_threshold=33554432"
# The caller's own tunables, which the worker's children get back.
CHILD_TUNABLES = "FUZZ_CHILD_GLIBC_TUNABLES"


def poisoned_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that poison a worker's heap, keeping the caller's tunables."""
    own = environ.get("GLIBC_TUNABLES", "")
    return {
        "GLIBC_TUNABLES": ":".join(filter(None, [own, POISON_TUNABLES])),
        CHILD_TUNABLES: own,
    }


def unpoison_children() -> None:
    """In a running worker: its children get the caller's tunables back."""
    if CHILD_TUNABLES not in os.environ:
        return
    own = os.environ.pop(CHILD_TUNABLES)
    if own:
        os.environ["GLIBC_TUNABLES"] = own
    else:
        os.environ.pop("GLIBC_TUNABLES", None)


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    examples: int  # programs per run (all workers together)
    seconds: float | None  # generation time budget; None: until `examples`
    max_ops: int
    # the default seed is 0 (reproducible runs); else a random one.  Every
    # worker draws from hypothesis seeded with seed + its slot: one fixed
    # derandomized stream would give every worker the same programs.
    fixed_seed: bool
    database: bool
    shrink_grace: float  # extra seconds for shrinking a failure found late
    # programs compiled as one graph (check.check_batch); --batch overrides
    batch: int = 4


PROFILES = {
    "ci": Profile("ci", 15, None, 6, True, False, 90),
    "dev": Profile("dev", 100_000, 300, 7, False, True, 240),
    "nightly": Profile("nightly", 1_000_000, 3600, 10, False, True, 900),
    # make fuzz-mutants: seeded, no example database (one mutant's failures
    # must not be replayed against the next), stopped by the mutant runner
    "mutants": Profile("mutants", 100_000, 90, 7, False, False, 0),
}


class _TimeUp(BaseException):
    """Ends a worker's hypothesis run (BaseException: hypothesis lets it through)."""


class OverlayMismatch(AssertionError):
    pass


class OverlayCrash(AssertionError):
    pass


# --- worker ------------------------------------------------------------------


@dataclasses.dataclass
class WorkerOptions:
    index: int
    seed: int
    examples: int
    deadline: float  # time.time() after which no new program starts
    profile: str
    out_dir: Path
    repro_dir: Path
    focus: str = "all"
    shrink: bool = True
    max_ops: int | None = None
    workers: int = 1  # how many share the seed programs (corpus.py)
    batch: int = 1  # programs compiled as one graph (check.check_batch)


class _Recorder:
    def __init__(self, path: Path):
        self.file = path.open("a", buffering=1)

    def write(self, record_type: str, **fields) -> None:
        self.file.write(
            json.dumps({"type": record_type, "t": time.time(), **fields}) + "\n"
        )


def case_to_json(case) -> dict:
    return dataclasses.asdict(case)


def case_from_json(data: dict):
    from .program import FuzzCase, InputSpec

    inputs = tuple(
        InputSpec(**{**spec, "shape": tuple(spec["shape"])}) for spec in data["inputs"]
    )
    return FuzzCase(**{**data, "inputs": inputs, "kinds": tuple(data.get("kinds", ()))})


# Where the dev and nightly profiles keep failing examples, to replay them
# first next time: .hypothesis/fuzz, or $FUZZ_HYPOTHESIS_DB (make fuzz
# FUZZ_DB=...), read and written next to the local directory so that machines
# share what each one found:
#   a directory on shared storage;
#   redis://host:port/db, hypothesis' Redis database (pip install redis);
#   github:OWNER/REPO[/ARTIFACT], read only: the example database a CI run of
#   that repository uploaded as an artifact (default name
#   hypothesis-example-db; the nightly workflow uploads .hypothesis/fuzz under
#   it), hypothesis' GitHubArtifactDatabase ($GITHUB_TOKEN for a private
#   repository).  What this run finds goes to the local directory, which the
#   workflow uploads in turn.
DATABASE_ENV = "FUZZ_HYPOTHESIS_DB"
GITHUB_ARTIFACT = "hypothesis-example-db"


def example_database(location: str | None = None):
    """The local database, multiplexed with the shared one at ``location``
    (default: $FUZZ_HYPOTHESIS_DB) if any."""
    from hypothesis.database import (
        DirectoryBasedExampleDatabase,
        ExampleDatabase,
        MultiplexedDatabase,
    )

    local = DirectoryBasedExampleDatabase(str(REPO_ROOT / ".hypothesis" / "fuzz"))
    location = os.environ.get(DATABASE_ENV, "") if location is None else location
    if not location:
        return local
    shared: ExampleDatabase
    if location.startswith("redis://"):
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase

        shared = RedisExampleDatabase(redis.Redis.from_url(location))
    elif location.startswith("github:"):
        shared = github_artifact_database(location.removeprefix("github:"))
    else:
        shared = DirectoryBasedExampleDatabase(location)
    return MultiplexedDatabase(local, shared)


def github_artifact_database(spec: str):
    """``OWNER/REPO[/ARTIFACT]``: the artifact's database, read only (it is
    downloaded on the first read)."""
    from hypothesis.database import GitHubArtifactDatabase, ReadOnlyDatabase

    parts = spec.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise ValueError(f"github:{spec}: expected github:OWNER/REPO[/ARTIFACT]")
    owner, repo, *artifact = parts
    name = artifact[0] if artifact else GITHUB_ARTIFACT
    return ReadOnlyDatabase(GitHubArtifactDatabase(owner, repo, artifact_name=name))


def hypothesis_settings(profile: Profile, examples: int, shrink: bool):
    from hypothesis import HealthCheck, Phase, settings

    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if shrink:
        phases.append(Phase.shrink)
    return settings(
        max_examples=max(1, examples),
        deadline=None,
        database=example_database() if profile.database else None,
        phases=phases,
        print_blob=False,
        report_multiple_bugs=True,
        suppress_health_check=list(HealthCheck),
    )


def run_worker(opts: WorkerOptions) -> None:
    import warnings

    unpoison_children()

    from hypothesis import example, given, reject, seed

    from .branch_reach import switch_context
    from .check import check_batch
    from .corpus import corpus_for
    from .repro import known_crashes, signature, write_repro
    from .strategy import StrategyParams, fuzz_batches

    warnings.filterwarnings("ignore")
    profile = PROFILES[opts.profile]
    params = StrategyParams(max_ops=opts.max_ops or profile.max_ops, focus=opts.focus)
    rec = _Recorder(opts.out_dir / f"worker{opts.index}.jsonl")
    rec.write("begin", seed=opts.seed, examples=opts.examples, pid=os.getpid())
    # kind -> (case, result); the latest one is the smallest (hypothesis shrinks)
    failures: dict[str, tuple] = {}
    stock_seen: set[str] = set()
    grew_seen: set[str] = set()
    noise_seen: set[str] = set()
    stock_dir = opts.out_dir / "stock_wrong"

    # digest -> CheckResult: hypothesis repeats programs
    checked: dict[str, Any] = {}
    known = known_crashes(opts.repro_dir)  # crashes that have an xfail repro already

    class _Enough(BaseException):
        """``opts.examples`` distinct generated programs checked: hypothesis
        repeats programs, within a batch and across calls, so its call count
        is not the number of programs."""

    seed_programs = corpus_for(opts.index, opts.workers)
    seed_digests = {case.digest() for case in seed_programs}

    def fuzz_one(cases):
        if time.time() > opts.deadline + (profile.shrink_grace if failures else 0):
            raise _TimeUp
        generated = len(checked.keys() - seed_digests)
        if generated >= opts.examples and not failures:
            raise _Enough
        digests = [case.digest() for case in cases]
        # each program once: hypothesis may draw one twice in a batch
        fresh = list(
            {d: c for c, d in zip(cases, digests) if d not in checked}.values()
        )
        for case in fresh:
            rec.write("start", case=case_to_json(case))
        switch_context(fresh)  # under --coverage: branches per program
        for case, result in zip(fresh, check_batch(fresh) if fresh else []):
            sig = signature(result.kind, result.message)
            if result.failed and result.crashed and sig in known:
                result = dataclasses.replace(result, status="known")
            checked[case.digest()] = result
            record(case, result, case.digest())
        results = [checked[d] for d in digests]
        if all(result.status == "invalid" for result in results):
            reject()
        for case, result in zip(cases, results):
            if result.failed:
                failures[result.kind] = (result.repro or case, result)
        for result in results:
            if result.failed and result.crashed:
                raise OverlayCrash(f"{result.kind}: {result.message}")
        for result in results:
            if result.failed:
                raise OverlayMismatch(f"{result.kind}: {result.message}")

    def record(case, result, digest):
        rec.write(
            "example",
            status=result.status,
            kind=result.kind,
            message=result.message[:2000] if result.status != "ok" else "",
            stats=result.stats,
            kinds=list(case.kinds),
            config=case.config,
            dynamic=case.dynamic,
            low_precision=case.low_precision,
            variant=[f"{name}={value}" for name, value in case.variant()],
            shrinking=bool(failures),
            digest=digest,
        )
        grew = result.stats.get("nests_on", 0) > result.stats.get("nests_off", 1 << 30)
        if grew and len(grew_seen) < 20 and not failures:
            grew_seen.add(digest)
            write_repro(
                case, "flags on emits more loop nests than flags off",
                f"{result.stats['nests_off']} loop nests with flags off, "
                f"{result.stats['nests_on']} with flags on (not a correctness failure)",
                opts.out_dir / "more_nests",
            )  # fmt: skip
        if result.status == "noise" and len(noise_seen) < 20 and not failures:
            noise_seen.add(digest)
            write_repro(case, result.kind, result.message, opts.out_dir / "noise")
        if result.status == "stock" and result.kind not in stock_seen:
            stock_seen.add(result.kind)
            path = write_repro(
                case, f"stock also wrong: {result.kind}", result.message, stock_dir
            )
            rec.write(
                "stock", kind=result.kind, message=result.message[:2000], path=str(path)
            )

    test = given(fuzz_batches(params, opts.batch))(fuzz_one)
    seeds = batches(seed_programs, opts.batch)
    for batch in reversed(seeds):
        test = example(batch)(test)  # seed programs run first
    test = seed(opts.seed)(
        # up to `examples` calls: _Enough ends the run at `examples` programs
        hypothesis_settings(profile, opts.examples, opts.shrink)(test)
    )
    reason = "examples"
    try:
        test()
    except _TimeUp:
        reason = "time"
    except _Enough:
        reason = "examples"
    except Exception as exc:  # noqa: BLE001 - hypothesis re-raises the shrunk failure(s)
        reason = "failure" if failures else f"error: {type(exc).__name__}: {exc}"
    for kind, (case, result) in failures.items():
        path = write_repro(
            case,
            kind,
            result.message,
            opts.repro_dir,
            found_by=f"tools.fuzz (profile {opts.profile}, worker seed {opts.seed})",
        )
        rec.write(
            "failure", kind=kind, message=result.message[:4000], path=str(path),
            source=case.source, case=case_to_json(case),
        )  # fmt: skip
    rec.write("done", reason=reason)


def batches(cases, size: int) -> list[tuple]:
    """``cases`` in order, grouped into batches of up to ``size`` that
    compile alike (``check.batch_key``)."""
    from .check import batch_key

    groups: dict[tuple, list] = {}
    out: list[tuple] = []
    for case in cases:
        group = groups.setdefault(batch_key(case), [])
        group.append(case)
        if len(group) == size:
            out.append(tuple(group))
            group.clear()
    out += [tuple(group) for group in groups.values() if group]
    return out


# --- parent ------------------------------------------------------------------


@dataclasses.dataclass
class Summary:
    profile: str
    workers: int
    seeds: list[int]
    seconds: float
    out_dir: Path
    records: list[dict]
    failures: list[dict]
    stock: list[dict]
    crashed_workers: list[str]
    coverage: dict | None = None
    branches: dict | None = None  # branch_reach.report, under --coverage
    shard: str = "1/1"
    indices: list[int] = dataclasses.field(default_factory=list)
    worker_seconds: float = 0.0  # summed over workers (merged shards: all)
    # stopped (Ctrl-C, SIGTERM of a preempted machine) before its budget ran
    # out: its programs count, its summary says so, and merge reports it
    interrupted: bool = False

    def programs_per_worker_second(self) -> float:
        busy = self.worker_seconds or self.seconds * self.workers
        return len(self.examples) / busy if busy else 0.0

    @property
    def examples(self) -> list[dict]:
        return [r for r in self.records if r["type"] == "example"]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.crashed_workers

    def stats(self) -> dict:
        return aggregate(self.examples)


def aggregate(examples: list[dict]) -> dict:
    checked = [r for r in examples if r["status"] != "invalid"]
    by_status = collections.Counter(r["status"] for r in examples)
    s: collections.Counter[str] = collections.Counter()
    programs_with: collections.Counter[str] = collections.Counter()
    reach: collections.Counter[str] = collections.Counter()
    for r in checked:
        st = r["stats"]
        reach.update(feature for feature, n in st.get("reach", {}).items() if n)
        for key in ("nests_off", "nests_on", "outer_fused_off", "outer_fused_on",
                    "retiled", "reordered", "splits", "streamed", "prefetched",
                    "compile_s_off", "compile_s_on", "kernels_reused"):  # fmt: skip
            s[key] += st.get(key, 0) or 0
            if key in st:
                s[f"n_{key}"] += 1
            if st.get(key):
                programs_with[key] += 1
        programs_with["code_differs"] += bool(st.get("code_differs"))
        programs_with["more_nests"] += st.get("nests_on", 0) > st.get(
            "nests_off", 1 << 30
        )
    kinds = collections.Counter(k for r in checked for k in r.get("kinds", ()))
    return {
        "tried": len(examples),
        "checked": len(checked),
        # compiles: a batch's statistics sit on its first program's record
        "compiled_units": sum(1 for r in checked if not r["stats"].get("batched")),
        "shrinking": sum(1 for r in examples if r.get("shrinking")),
        "status": dict(by_status),
        "totals": dict(s),
        "programs_with": dict(programs_with),
        # per overlay feature: programs whose kernels its decisions changed
        "reach": {feature: reach.get(feature, 0) for feature in FEATURES},
        "kinds": dict(kinds.most_common()),
        "configs": dict(collections.Counter(r["config"] for r in checked)),
        "dynamic": sum(1 for r in checked if r.get("dynamic")),
        "low_precision": sum(1 for r in checked if r.get("low_precision")),
        "variants": dict(
            collections.Counter(v for r in checked for v in r.get("variant", ()))
        ),
    }


def _read_records(out_dir: Path, indices) -> list[dict]:
    """The records of the workers ``indices`` (their global indices)."""
    records = []
    for i in indices:
        path = out_dir / f"worker{i}.jsonl"
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                records.append({**json.loads(line), "worker": i})
            except json.JSONDecodeError:
                pass  # a line being written
    return records


def _progress_line(elapsed: float, records: list[dict]) -> str:
    ex = [r for r in records if r["type"] == "example"]
    agg = aggregate(ex)
    st, pw = agg["status"], agg["programs_with"]
    reported = sum(1 for r in records if r["type"] == "failure")
    found = len({(r["worker"], r["kind"]) for r in ex if r["status"] == "ours"})
    shrinking = " (shrinking)" if found > reported else ""
    return (
        f"fuzz [{elapsed:5.0f}s] programs {agg['tried']:4d}"
        f" | ok {st.get('ok', 0)} | FAIL {max(found, reported)}{shrinking}"
        f" | stock-wrong {st.get('stock', 0)}"
        f" | known {st.get('known', 0)} | noise {st.get('noise', 0)}"
        f" | invalid {st.get('invalid', 0)}"
        f" | overlay changed code {pw.get('code_differs', 0)}"
        f" | features reached {sum(1 for n in agg['reach'].values() if n)}"
        f"/{len(agg['reach'])}"
    )


def _worker_command(
    opts: WorkerOptions, coverage_include: list[str] | None
) -> list[str]:
    cmd = [sys.executable]
    if coverage_include is not None:
        cmd += [
            "-m", "coverage", "run", "--parallel-mode", "--branch",
            f"--data-file={opts.out_dir / '.coverage'}",
            f"--include={','.join(coverage_include)}",
        ]  # fmt: skip
    cmd += [
        "-m", "tools.fuzz", "worker",
        "--index", str(opts.index), "--seed", str(opts.seed),
        "--examples", str(opts.examples), "--deadline", repr(opts.deadline),
        "--profile", opts.profile, "--out", str(opts.out_dir),
        "--workers", str(opts.workers), "--batch", str(opts.batch),
        "--repro-dir", str(opts.repro_dir), "--focus", opts.focus,
    ]  # fmt: skip
    if not opts.shrink:
        cmd.append("--no-shrink")
    if opts.max_ops:
        cmd += ["--max-ops", str(opts.max_ops)]
    return cmd


_COVERAGE_REPORTS = threading.Lock()


def run_fuzz(
    profile: str = "dev",
    *,
    seconds: float | None = None,
    examples: int | None = None,
    seed: int | None = None,
    workers: int | None = None,
    coverage: bool = False,
    repro_dir: Path | None = None,
    out_dir: Path | None = None,
    focus: str = "all",
    shrink: bool = True,
    max_ops: int | None = None,
    streaming: bool = False,
    poison: bool = True,
    shard: tuple[int, int] = (1, 1),
    cache_dir: Path | None = None,
    cache_budget: int | None = None,
    batch: int | None = None,
    progress_every: float = 15.0,
    log=print,
) -> Summary:
    """One campaign, or shard ``(I, N)`` of one: the campaign's worker slots
    are N times ``workers``; this shard runs slots (I-1)*workers ... I*workers-1,
    with their seeds (seed + slot), their share of the seed programs and of
    ``examples``, so that shards never overlap (``merge_runs`` joins them)."""
    from .repro import DEFAULT_REPRO_DIR

    prof = PROFILES[profile]
    seconds = prof.seconds if seconds is None else seconds
    examples = prof.examples if examples is None else examples
    workers = workers or max(1, min(os.cpu_count() or 1, 8))
    workers = max(1, min(workers, examples))
    shard_index, shard_count = shard
    slots = workers * shard_count
    if seed is None:
        seed = 0 if prof.fixed_seed else random.randrange(1_000_000)
    indices = [(shard_index - 1) * workers + i for i in range(workers)]
    seeds = [seed + g for g in indices]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    tag = f"-shard{shard_index}of{shard_count}" if shard_count > 1 else ""
    out_dir = Path(out_dir or DEFAULT_OUT / f"{stamp}-{profile}-seed{seed}{tag}")
    out_dir.mkdir(parents=True, exist_ok=True)
    repro_dir = Path(repro_dir or DEFAULT_REPRO_DIR)

    include = None
    if coverage:
        from .overlay_coverage import measured_files

        include = [str(p) for p in measured_files().values()]

    start = time.time()
    deadline = start + seconds if seconds else float("inf")
    # Inductor's cache is kept from run to run (build/fuzz/inductor-cache,
    # unless the caller chose one): the vector-ISA probe and every C++ module
    # already built for the same source and compiler flags (the seed
    # programs flags off, a program drawn again) are not compiled again.
    # The graph caches stay off (force_disable_caches): every program is
    # lowered fresh.  Every program leaves its .so files there, so the run
    # prunes the cache to CACHE_BUDGET_BYTES when it ends.
    own_cache = None
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        own_cache = Path(cache_dir or DEFAULT_CACHE)
        own_cache.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **({"TORCHINDUCTOR_CACHE_DIR": str(own_cache)} if own_cache else {}),
        "TORCHINDUCTOR_COMPILE_THREADS": "1",  # one process per worker, no compile pool
        "PYTHONPATH": os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
        **(STREAMING_ENV if streaming else {}),
        **(poisoned_env(os.environ) if poison else {}),
    }
    log(
        f"fuzz: profile {profile}, {workers} worker(s), seeds {seeds[0]}..{seeds[-1]}, "
        + (f"shard {shard_index}/{shard_count}, " if shard_count > 1 else "")
        + f"{examples} programs max in all shards, "
        + (f"{seconds:.0f} s" if seconds else "no time limit")
        + (", coverage on" if coverage else "")
        + f"\nfuzz: run directory {out_dir}"
    )
    procs = []
    for i, g in enumerate(indices):
        opts = WorkerOptions(
            index=g,
            seed=seeds[i],
            examples=max(1, examples // slots + (1 if g < examples % slots else 0)),
            deadline=deadline if math.isfinite(deadline) else 1e18,
            profile=profile,
            out_dir=out_dir,
            repro_dir=repro_dir,
            focus=focus,
            shrink=shrink,
            max_ops=max_ops,
            workers=slots,
            batch=batch or prof.batch,
        )
        log_file = (out_dir / f"worker{g}.log").open("w")
        proc = subprocess.Popen(
            _worker_command(opts, include), cwd=REPO_ROOT, env=env,
            stdout=log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip
        procs.append(proc)

    # The parent's own limit: generation, shrinking, start-up and a slow last compile.
    hard_limit = (seconds or 3600 * 24) + prof.shrink_grace + 300
    last_print = 0.0
    printed_failures = 0
    interrupted = False
    restore_sigterm = _sigterm_interrupts()
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(1.0)
            elapsed = time.time() - start
            records = _read_records(out_dir, indices)
            n_fail = sum(1 for r in records if r["type"] == "failure")
            if elapsed - last_print >= progress_every or n_fail > printed_failures:
                log(_progress_line(elapsed, records))
                last_print, printed_failures = elapsed, n_fail
            if elapsed > hard_limit:
                log(
                    f"fuzz: workers still running after {hard_limit:.0f} s, "
                    "stopping them"
                )
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        # stopped from outside: the workers stop too, and what they checked
        # is summarized like a finished run, marked interrupted
        interrupted = True
        log("fuzz: interrupted, stopping the workers and writing the summary")
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
    finally:
        restore_sigterm()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if own_cache:
            prune_cache(own_cache, cache_budget)

    records = _read_records(out_dir, indices)
    crashed = _crashed_workers(
        procs, indices, records, out_dir, repro_dir, stopped=interrupted
    )
    summary = Summary(
        profile=profile,
        workers=workers,
        seeds=seeds,
        seconds=time.time() - start,
        out_dir=out_dir,
        records=records,
        failures=[r for r in records if r["type"] == "failure"],
        stock=[r for r in records if r["type"] == "stock"],
        crashed_workers=crashed,
        shard=f"{shard_index}/{shard_count}",
        indices=indices,
        interrupted=interrupted,
    )
    if coverage:
        from .overlay_coverage import report

        from .branch_reach import report as branch_report

        # coverage.py parses sources with ast.parse, which CPython 3.11
        # before 3.11.8 cannot run in two threads at once ("AST constructor
        # recursion depth mismatch"): shards run side by side in one process
        # report one at a time
        with _COVERAGE_REPORTS:
            summary.coverage = report(out_dir)
            summary.branches = branch_report([out_dir])
    (out_dir / "summary.json").write_text(
        json.dumps(
            {
                "profile": profile, "workers": workers, "seeds": seeds,
                "shard": summary.shard, "indices": indices,
                "seconds": summary.seconds, "stats": summary.stats(),
                "failures": summary.failures, "stock": summary.stock,
                "crashed_workers": crashed, "coverage": summary.coverage,
                "branches": summary.branches,
                "interrupted": interrupted,
            },
            indent=1, default=str,
        )
    )  # fmt: skip
    log(format_summary(summary))
    return summary


def prune_cache(root: Path, budget: int | None = None) -> int:
    """Remove the least recently used files of an Inductor cache until it
    holds at most ``budget`` bytes (CACHE_BUDGET_BYTES); the bytes kept."""
    budget = CACHE_BUDGET_BYTES if budget is None else budget
    files = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                st = path.stat()
                files.append((max(st.st_atime, st.st_mtime), st.st_size, path))
        except OSError:  # removed meanwhile
            continue
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files, key=lambda f: f[0]):
        if total <= budget:
            break
        path.unlink(missing_ok=True)
        total -= size
    return total


def merge_runs(run_dirs: list[Path]) -> tuple[Summary, list[str]]:
    """One summary of the shards' run directories, and what is missing: a
    shard not given, given twice, or of another campaign (profile, count)."""
    problems: list[str] = []
    metas = []
    for run_dir in run_dirs:
        path = Path(run_dir) / "summary.json"
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir} has no summary.json: not a fuzz run")
        metas.append((Path(run_dir), json.loads(path.read_text())))
    campaigns = {(m["profile"], m.get("shard", "1/1").split("/")[1]) for _, m in metas}
    if len(campaigns) > 1:
        problems.append(
            f"runs of different campaigns (profile, shards): {sorted(campaigns)}"
        )
    seen: dict[str, Path] = {}
    records: list[dict] = []
    for run_dir, meta in metas:
        shard = meta.get("shard", "1/1")
        if shard in seen:
            problems.append(f"shard {shard} given twice ({seen[shard]}, {run_dir})")
            continue
        seen[shard] = run_dir
        indices = meta.get("indices") or list(range(meta["workers"]))
        records += _read_records(run_dir, indices)
    count = int(next(iter(campaigns))[1]) if campaigns else 1
    expected = [f"{i}/{count}" for i in range(1, count + 1)]
    missing = [shard for shard in expected if shard not in seen]
    if missing:
        problems.append("missing shard(s) " + ", ".join(missing))
    stopped = [m.get("shard", "1/1") for _, m in metas if m.get("interrupted")]
    if stopped:
        problems.append(
            "interrupted before their budget ran out: shard(s) " + ", ".join(stopped)
        )
    summary = Summary(
        profile=metas[0][1]["profile"],
        workers=sum(m["workers"] for _, m in metas),
        seeds=[s for _, m in metas for s in m["seeds"]],
        seconds=max(m["seconds"] for _, m in metas),
        out_dir=Path(run_dirs[0]).parent,
        records=records,
        failures=[f for _, m in metas for f in m["failures"]],
        stock=[f for _, m in metas for f in m["stock"]],
        crashed_workers=[c for _, m in metas for c in m["crashed_workers"]],
        shard=f"{len(seen)} of {count} merged",
        worker_seconds=sum(m["seconds"] * m["workers"] for _, m in metas),
        interrupted=bool(stopped),
    )
    if all(m.get("branches") for _, m in metas):
        # every shard ran under --coverage: the campaign's branches, counted
        # over all its programs
        from .branch_reach import report as branch_report

        summary.branches = branch_report([run_dir for run_dir, _ in metas])
    return summary, problems


def _sigterm_interrupts():
    """Make SIGTERM (a CI job cancelled, a machine preempted) stop the run as
    Ctrl-C does; returns the function that restores the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _crashed_workers(
    procs, indices, records, out_dir: Path, repro_dir: Path, stopped: bool = False
) -> list[str]:
    """Workers that died without finishing: the program they checked is a repro.

    ``stopped``: the run was interrupted, so a worker ended by the SIGTERM
    the parent sent did not crash."""
    from .repro import write_repro

    crashed = []
    for i, proc in zip(indices, procs):
        mine = [r for r in records if r["worker"] == i]
        if any(r["type"] == "done" for r in mine) and proc.returncode == 0:
            continue
        if stopped and proc.returncode in (-signal.SIGTERM, 0):
            continue
        how = (
            f"signal {-proc.returncode}"
            if proc.returncode and proc.returncode < 0
            else f"exit code {proc.returncode}"
        )
        line = f"worker {i} ({how}), log {out_dir / f'worker{i}.log'}"
        starts = [r for r in mine if r["type"] in ("start", "example")]
        if starts and starts[-1]["type"] == "start":
            case = case_from_json(starts[-1]["case"])
            path = write_repro(
                case, f"worker died ({how}) while checking this program",
                "unshrunk: the process died, so hypothesis could not shrink it",
                repro_dir,
            )  # fmt: skip
            line += f", repro {path}"
        crashed.append(line)
    return crashed


def _rel(path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def format_summary(summary: Summary) -> str:
    agg = summary.stats()
    st, tot, pw = agg["status"], agg["totals"], agg["programs_with"]
    checked = agg["checked"] or 1
    lines = [
        "",
        (
            f"== fuzz summary: profile {summary.profile}, {summary.workers} worker(s), "
            f"seeds {min(summary.seeds)}..{max(summary.seeds)}, "
            + (f"shard {summary.shard}, " if summary.shard != "1/1" else "")
            + f"{summary.seconds:.0f} s"
            + (", interrupted" if summary.interrupted else "")
            + " =="
        ),
        (
            f"  programs tried          {agg['tried']:6d}   (checked {agg['checked']}, "
            f"invalid {st.get('invalid', 0)}, while shrinking {agg['shrinking']})"
        ),
        (
            f"  throughput              {summary.programs_per_worker_second():6.2f}"
            "   programs per second per worker"
        ),
        f"  overlay failures        {len(summary.failures):6d}",
    ]
    units = agg.get("compiled_units", agg["checked"])
    if units < agg["checked"]:
        lines.append(
            f"  batches                 {units:6d}   (programs compiled together; "
            "the statistics below count batches as programs)"
        )
    for f in summary.failures:
        lines.append(f"    [{f['kind']}] {_rel(f['path'])}")
        lines.append(f"      {f['message'][:300]}")
    lines.append(
        f"  known crashes           {st.get('known', 0):6d}   "
        "(their signature is in an xfail repro in the repro dir)"
    )
    lines.append(
        f"  stock also wrong        {st.get('stock', 0):6d}   "
        "(upstream; not counted as failures)"
    )
    for s in summary.stock:
        lines.append(f"    [{s['kind']}] {_rel(s['path'])}")
    lines.append(
        f"  numerical noise         {st.get('noise', 0):6d}   "
        "(flags on differs, but as accurately as flags off; see noise/)"
    )
    if summary.crashed_workers:
        lines.append(f"  crashed workers         {len(summary.crashed_workers):6d}")
        lines += [f"    {c}" for c in summary.crashed_workers]

    def mean(key):
        n = tot.get(f"n_{key}", 0)
        return tot.get(key, 0) / n if n else 0.0

    def both(label: str, counts: dict, key: str) -> str:
        off, on = counts.get(f"{key}_off", 0), counts.get(f"{key}_on", 0)
        return f"    {label:<36s}{off:9d}   {on:9d}"

    def on_only(label: str, key: str) -> str:
        return f"    {label:<44s}-   {tot.get(key, 0):9d} ({pw.get(key, 0)})"

    lines += [
        "",
        "  fusion statistics (checked programs)   flags off    flags on",
        both("loop nests, total", tot, "nests"),
        both("outer-loop fused groups", tot, "outer_fused"),
        both("programs with outer-loop fusion", pw, "outer_fused"),
        on_only("re-tiled merges (programs)", "retiled"),
        on_only("outer-loop splits applied (programs)", "splits"),
        on_only("loop reorders (programs)", "reordered"),
        on_only("kernels with streamed stores (programs)", "streamed"),
        on_only("kernels with prefetches (programs)", "prefetched"),
        on_only("kernels built once, same C++ (programs)", "kernels_reused"),
        f"    {'compile time, mean s':<36s}{mean('compile_s_off'):9.2f}   "
        f"{mean('compile_s_on'):9.2f}",
        (
            f"    overlay changed the generated code in {pw.get('code_differs', 0)} of "
            f"{agg['checked']} programs "
            f"({100.0 * pw.get('code_differs', 0) / checked:.0f}%)"
        ),
        (
            "    flags on emitted more loop nests than flags off in "
            f"{pw.get('more_nests', 0)} "
            "programs (performance, not correctness)"
        ),
        "",
        "  feature reach: programs whose kernels the feature's decisions changed",
        *(
            f"    {feature} {TITLES[feature]:<38s}{n:6d}"
            + ("   NOT REACHED" if not n else "")
            for feature, n in agg["reach"].items()
        ),
        (
            "  cases: "
            + ", ".join(f"{k} {v}" for k, v in agg["configs"].items())
            + f", dynamic {agg['dynamic']}, low precision {agg['low_precision']}"
            + "".join(f", {k} {v}" for k, v in agg["variants"].items())
        ),
        "  ops:   " + ", ".join(f"{k} {v}" for k, v in agg["kinds"].items()),
    ]
    if summary.coverage:
        from .overlay_coverage import format_report

        lines += ["", format_report(summary.coverage)]
    if summary.branches:
        from .branch_reach import format_report as format_branches

        lines += ["", format_branches(summary.branches, limit=20)]
    lines.append(f"  run directory: {_rel(summary.out_dir)}")
    lines.append("  result: " + ("OK" if summary.ok else "FAILURES FOUND"))
    return "\n".join(lines)
