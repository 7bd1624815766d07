"""python -m tools.fuzz run|merge|branches|sample|worker

See tools/fuzz/runner.py and docs/fuzzing.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _int_or_none(text: str) -> int | None:
    return int(text) if text not in ("", "none", "None") else None


def _float_or_none(text: str) -> float | None:
    return float(text) if text not in ("", "none", "None") else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="fuzz with N worker processes, then print a summary"
    )
    run.add_argument(
        "--profile", default="dev", choices=["ci", "dev", "nightly", "mutants"]
    )
    run.add_argument(
        "--seconds",
        type=_float_or_none,
        default=None,
        help="stop starting new programs after this long (default: the profile's)",
    )
    run.add_argument(
        "--examples",
        type=_int_or_none,
        default=None,
        help="programs to try, all workers together (default: the profile's)",
    )
    run.add_argument(
        "--seed",
        type=_int_or_none,
        default=None,
        help="worker i uses seed+i (default: 0 for ci, random otherwise)",
    )
    run.add_argument(
        "--workers",
        type=_int_or_none,
        default=None,
        help="worker processes (default: the number of cores, at most 8)",
    )
    run.add_argument(
        "--coverage",
        action="store_true",
        help="line coverage of the overlay modules and patched hunks",
    )
    run.add_argument(
        "--repro-dir",
        type=Path,
        default=None,
        help="where failure repros go (default: test/regressions)",
    )
    run.add_argument(
        "--out", type=Path, default=None, help="run directory (default: build/fuzz/...)"
    )
    run.add_argument(
        "--focus",
        default="all",
        choices=["all", "norms", "layouts"],
        help="weight the op mix towards norms or layout changes",
    )
    run.add_argument("--max-ops", type=_int_or_none, default=None)
    run.add_argument(
        "--no-shrink", action="store_true", help="report failures unshrunk (faster)"
    )
    run.add_argument(
        "--streaming",
        action="store_true",
        help="a 64 KiB cache size: the small programs use streaming stores "
        "(0013) and prefetches (0014)",
    )
    run.add_argument(
        "--no-poison",
        action="store_true",
        help="leave the workers' heap unpoisoned (new and freed memory keeps "
        "what was there)",
    )

    run.add_argument(
        "--shard",
        default="1/1",
        help="I/N: shard I of a campaign of N (seeds, seed programs and "
        "examples split without overlap; `merge` joins the shards' runs)",
    )

    run.add_argument(
        "--batch",
        type=_int_or_none,
        default=None,
        help="programs compiled as one graph, each compared on its own "
        "(default: the profile's; 1: one program per compile)",
    )

    merge = sub.add_parser("merge", help="one summary of the shards' run directories")
    merge.add_argument("dirs", type=Path, nargs="+")

    branches = sub.add_parser(
        "branches",
        help="branch reach of runs made with --coverage (a campaign's shards "
        "together): every branch of the overlay's decision code, the programs "
        "that took it, the unreached ones and why",
    )
    branches.add_argument("dirs", type=Path, nargs="+")
    branches.add_argument(
        "--check", action="store_true",
        help="exit 1 when a branch this machine's baseline saw reached is not",
    )  # fmt: skip
    branches.add_argument(
        "--write-baseline", action="store_true",
        help="record the reached branches as this machine's baseline",
    )  # fmt: skip
    branches.add_argument(
        "--about",
        default="make test's campaign: test_fuzz_ci_profile (ci profile, seed 0, "
        "2 shards, cache size 32 MiB)",
        help="what the baseline's runs were",
    )
    branches.add_argument("--json", type=Path, help="write the table here too")

    sample = sub.add_parser("sample", help="print random programs from the strategy")
    sample.add_argument("-n", type=int, default=3)
    sample.add_argument("--seed", type=int, default=0)
    sample.add_argument("--focus", default="all", choices=["all", "norms", "layouts"])
    sample.add_argument("--max-ops", type=int, default=6)

    worker = sub.add_parser("worker", help="(internal) one worker of `run`")
    worker.add_argument("--index", type=int, required=True)
    worker.add_argument("--seed", type=int, required=True)
    worker.add_argument("--examples", type=int, required=True)
    worker.add_argument("--deadline", type=float, required=True)
    worker.add_argument("--profile", required=True)
    worker.add_argument("--out", type=Path, required=True)
    worker.add_argument("--repro-dir", type=Path, required=True)
    worker.add_argument("--focus", default="all")
    worker.add_argument("--max-ops", type=int, default=None)
    worker.add_argument("--no-shrink", action="store_true")
    worker.add_argument("--workers", type=int, default=1)
    worker.add_argument("--batch", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        from .runner import WorkerOptions, run_worker

        options = WorkerOptions(
            index=args.index, seed=args.seed, examples=args.examples,
            deadline=args.deadline, profile=args.profile, out_dir=args.out,
            repro_dir=args.repro_dir, focus=args.focus, shrink=not args.no_shrink,
            max_ops=args.max_ops, workers=args.workers, batch=args.batch,
        )  # fmt: skip
        run_worker(options)
        return 0
    if args.command == "sample":
        return _sample(args)
    if args.command == "merge":
        return _merge(args.dirs)
    if args.command == "branches":
        return _branches(args)
    from .runner import run_fuzz

    shard = _shard(args.shard)

    summary = run_fuzz(
        args.profile, seconds=args.seconds, examples=args.examples, seed=args.seed,
        workers=args.workers, coverage=args.coverage, repro_dir=args.repro_dir,
        out_dir=args.out, focus=args.focus, shrink=not args.no_shrink,
        max_ops=args.max_ops, streaming=args.streaming, shard=shard,
        batch=args.batch, poison=not args.no_poison,
    )  # fmt: skip
    if summary.interrupted:
        return 130  # as a shell reports a Ctrl-C; the summary is written
    return 0 if summary.ok else 1


def _shard(text: str) -> tuple[int, int]:
    from tools.shards import parse_shard

    try:
        return parse_shard(text)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None


def _merge(dirs: list[Path]) -> int:
    from .runner import format_summary, merge_runs

    try:
        summary, problems = merge_runs(dirs)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    for problem in problems:
        print(f"  incomplete: {problem}")
    return 0 if summary.ok and not problems else 1


def _branches(args) -> int:
    import json

    from . import branch_reach

    try:
        data = branch_reach.report(args.dirs)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(branch_reach.format_report(data))
    print(branch_reach.format_reasons(data))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    path = branch_reach.baseline_path()
    if args.write_baseline:
        try:
            branch_reach.write_baseline(data, path, args.about)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"  baseline written: {path}")
    if args.check:
        lost = branch_reach.check_baseline(data, path)
        for key in lost:
            print(f"  LOST: {key}")
        return 1 if lost else 0
    return 0


def _sample(args) -> int:
    from .strategy import StrategyParams, sample_cases

    params = StrategyParams(max_ops=args.max_ops, focus=args.focus)
    for case in sample_cases(args.n, args.seed, params):
        print(f"# inputs {case.inputs}\n# input seed {case.input_seed}, dynamic "
              f"{case.dynamic}, config {case.config}, flags {case.flags}")  # fmt: skip
        print(case.source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
