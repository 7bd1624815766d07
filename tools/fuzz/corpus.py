"""Seed programs: one per group of overlay features, run before generation.

Every profile starts with these (hypothesis' explicit examples, split over
the workers), so that even a short run reaches every feature's code once;
the generated programs then vary around the same preconditions
(``strategy.FAMILIES``).  ``test/test_fuzz.py`` checks that together they
reach every feature.
"""

from __future__ import annotations

from .program import SOURCE_HEADER, FuzzCase, InputSpec


def _case(body: str, shapes, kinds, **variant) -> FuzzCase:
    names = ", ".join(f"x{i}" for i in range(len(shapes)))
    source = f"{SOURCE_HEADER}\n\ndef program({names}):\n{body}"
    inputs = tuple(InputSpec(tuple(shape)) for shape in shapes)
    return FuzzCase(source, inputs, kinds=tuple(kinds), **variant)


CORPUS = (
    # 0002 0004 0008 0010 0013 0014: LayerNorm over rows of 2048, 2 MiB
    # under a 256 KiB "cache"
    _case(
        "    v1 = F.layer_norm(x0, (2048,), None, None, eps=1e-5)\n    return (v1,)\n",
        [(64, 2048)],
        ["norm"],
        cache_bytes=262144,
    ),
    # 0009 0011: softmax over channels spelled out; its exp stays per block
    _case(
        "    v1 = torch.amax(x0, dim=(1,), keepdim=True)\n"
        "    v2 = torch.exp((x0 - v1).clamp(-6, 6))\n"
        "    v3 = torch.sum(v2, dim=(1,), keepdim=True)\n"
        "    v4 = v2 / (v3.abs() + 1)\n    return (v4,)\n",
        [(8, 16, 33)],
        ["reduce", "unary", "reduce", "binary"],
    ),
    # 0005 0012: with loop ordering after fusion, log_softmax's log step
    # joins min and sum kernels that then fail to merge
    _case(
        "    v1 = torch.amin(x0, dim=(2,), keepdim=True)\n"
        "    v2 = torch.log_softmax(v1, dim=1)\n    return (v2, v1,)\n",
        [(125, 32, 5, 2)],
        ["reduce", "softmax"],
    ),
    # 0006 0007: a strided column's erf chain, centered and stacked
    _case(
        "    v1 = x0[:, :, 16]\n    v2 = F.softplus(v1)\n    v3 = torch.erf(v1)\n"
        "    v4 = v2 + v3\n    v5 = torch.mean(v4, dim=(-1,), keepdim=True)\n"
        "    v6 = v4 - v5\n    v7 = v6 * v3\n"
        "    v8 = torch.stack([v6, v3, v7], dim=-1)\n    return (v8,)\n",
        [(4, 8, 64)],
        ["slice", "unary", "unary", "binary", "reduce", "binary", "binary", "cat"],
    ),
    # 0003: GroupNorm(4, 16), split from (N*C, HW) to (N*G, C/G, HW)
    _case(
        "    v1 = F.group_norm(x0, 4, None, None, eps=1e-5)\n    return (v1,)\n",
        [(2, 16, 8, 8)],
        ["norm"],
    ),
)


def corpus_for(worker: int, workers: int) -> tuple[FuzzCase, ...]:
    """This worker's share of the seed programs."""
    return CORPUS[worker::workers]
