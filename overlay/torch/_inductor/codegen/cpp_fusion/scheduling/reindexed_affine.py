"""Refuse a pointwise reindexing from the dependencies, before any loop body is built.

0005 reindexes a pointwise node onto a reduction's loops
(``loop_ordering.try_reindex_pointwise_for_reduction``) when the two would
then share a dependency exactly.  Finding out rebuilds the node's loop
bodies over the new loops, and most of that time goes to simplifying index
expressions that end up refused anyway: the channels of log_softmax over
(2, 48, 32, 32) against its reduction's (2, 3, 32, 32, 16) loops.

The dependencies tell most refusals in advance.  A reindexing keeps every
iteration's flat position (row-major over the old loops, then over the new
ones), so an old loop variable becomes an affine function of the new ones
only where its flat extent starts and ends on a boundary of the new loops.
Where a variable the index uses straddles one, its reindexed index has a
floor or a modulo of the new variables that no simplification removes: it
is not affine over the new loops, and it cannot equal an affine index of the
reduction, whatever loop order ``Scheduler.deps_match_normalized`` compares
them in.  ``cannot_share`` says so only when that holds for every pair of
deps on every buffer the two have in common; otherwise the body is built and
the deps compared as before.  The answer is the probe's, found cheaper.
"""

from __future__ import annotations

import math

import sympy
from torch._inductor.dependencies import MemoryDep


def cannot_share(pointwise_read_writes, reduction_read_writes, target) -> bool:
    """Whether no dep of the reindexed pointwise node can match one of the
    reduction's on a buffer they have in common (``target``: the new loop
    sizes).  False whenever that is not certain."""
    sizes = _static(target)
    if sizes is None:
        return False
    boundaries = {math.prod(sizes[i:]) for i in range(len(sizes) + 1)}
    common = pointwise_read_writes.buffer_names() & reduction_read_writes.buffer_names()
    for name in common:
        for dep in _deps_on(pointwise_read_writes, name):
            if not _leaves_affine_form(dep, sizes, boundaries):
                return False
        theirs = _deps_on(reduction_read_writes, name)
        if any(_affine_terms(dep) is None for dep in theirs):
            return False
    return True


def _deps_on(read_writes, name: str):
    return [dep for dep in read_writes.reads_and_writes() if dep.name == name]


def _leaves_affine_form(dep, sizes: list[int], boundaries: set[int]) -> bool:
    """Whether ``dep``'s index leaves affine form when its loops are
    reindexed to ``sizes``: some run of its variables straddles a boundary.
    False (not certain) for anything but an affine index over static loops
    that span the same iterations."""
    if not isinstance(dep, MemoryDep):
        return False
    terms = _affine_terms(dep)
    ranges = _static(dep.size)
    if terms is None or ranges is None or math.prod(ranges) != math.prod(sizes):
        return False
    return any(
        low not in boundaries or high not in boundaries
        for low, high in _runs(dep, terms, ranges)
    )


def _runs(dep, terms: dict, ranges: list[int]):
    """The flat extents [low, high) of the index's runs of variables: vars
    that the index walks as one (a coefficient that is the next one's times
    its range) form one run.  Unit and unused variables are left out."""
    runs: list[list[int]] = []  # [low, high, coefficient of the low end]
    for i in reversed(range(len(ranges))):  # innermost first
        coefficient = terms.get(dep.var_names[i], 0)
        if ranges[i] == 1 or coefficient == 0:
            continue
        low = math.prod(ranges[i + 1 :])
        if runs and _continues(runs[-1], low, coefficient):
            runs[-1][1] = low * ranges[i]
        else:
            runs.append([low, low * ranges[i], coefficient])
    return [(low, high) for low, high, _ in runs]


def _continues(run: list[int], low: int, coefficient: int) -> bool:
    """Whether a variable starting where ``run`` ends walks on from it: its
    coefficient is the run's times the run's extent."""
    run_low, run_high, run_coefficient = run
    return run_high == low and coefficient == run_coefficient * (low // run_low)


def _affine_terms(dep) -> dict | None:
    """Variable -> integer coefficient of an affine index, else None."""
    if not isinstance(dep, MemoryDep):
        return None
    terms = {}
    for term, coefficient in sympy.expand(dep.index).as_coefficients_dict().items():
        if not coefficient.is_Integer:
            return None
        if term == 1:
            continue
        if not isinstance(term, sympy.Symbol):
            return None
        terms[term] = int(coefficient)
    return terms


def _static(sizes) -> list[int] | None:
    out = []
    for size in sizes:
        size = sympy.sympify(size)
        if not size.is_Integer:
            return None
        out.append(int(size))
    return out
