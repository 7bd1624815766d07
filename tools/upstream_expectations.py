"""Upstream tests whose expectation the series changes, and why.

``tools.upstream_test`` reports a new failure (passes on stock, fails with
the overlay) listed here as explained, with its reason, and fails on every
other.  An entry names the patch whose feature changes the test's outcome
and says why the new behaviour is right; ``make pr`` carries the reasons
into the PR text.  A key is a test id as junit reports it, or its tail
(``Class.test_name``), which matches in every file.
"""

from __future__ import annotations

from typing import NamedTuple


class ExpectedChange(NamedTuple):
    patch: str  # the patch file's number, e.g. "0023"
    kind: str  # "more vectorized", "fewer kernels", ...
    reason: str


EXPECTED_CHANGES: dict[str, ExpectedChange] = {}
