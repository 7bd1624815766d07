"""Per-iteration local buffers for outer-loop fusions across loop orders.

An outer-loop fusion made by scheduling/block_fusion.py joins kernels that
read each other's outputs block by block (softmax over channels: max over
C, exp, sum over C, divide, fused over N).  An intermediate that only the
fused kernels read (the exp) is then written and re-read within one outer
iteration, yet stock writes it to a full-size global buffer: one more
tensor-sized stream to memory (and its write-allocate read) per call.
Stock's outer-loop local buffers do not apply: they need every kernel to
have a single inner loop and to read the buffer in the order it was written.

This module finds such intermediates and gives each a local buffer the size
of one block, allocated per thread like stock's.  Stock's index rewriting
(``rewrite_index_for_function``) keeps the defining kernel's inner loop
variables and zeroes the outer ones, which maps the block written at outer
index o onto [0, S) for the writer and every reader, provided that:

- the writer is a single pointwise store that writes the block densely
  (index = base(o) + w(inner), w a bijection onto [0, S)), and the local
  buffer has the writer's inner loop sizes;
- every read has the same base(o) and stays inside [0, S)
  (cpp_fusion.scheduling.block_fusion checks both, as for the fusion itself);
- no reader has loop variables the writer lacks (the rewriting keeps
  variables by name).

Anything else keeps its global buffer.  Flag: ``config.cpp.block_local_buffers``.
"""

from __future__ import annotations

import math

from torch._inductor import ir
from torch._inductor.virtualized import V

from .. import flag_requirements
from ..scheduling.block_fusion import (
    body_accesses,
    dense_block_size,
    fusion_log,
    is_outer_block_fusion,
    outer_blocks_disjoint,
    same_block,
)


def block_local_buffers(node, first_index: int) -> list[tuple[ir.Buffer, ir.Buffer]]:
    """(local buffer, global buffer) pairs for the intermediates of ``node``."""
    if not flag_requirements.enabled("block_local_buffers"):
        return []
    if not is_outer_block_fusion(node):
        return []
    depth = node.outer_loop_fusion_depth
    members = node.get_nodes()
    pairs: list[tuple[ir.Buffer, ir.Buffer]] = []
    for writer in members:
        global_buffer = _private_intermediate(writer, members)
        if global_buffer is None or _an_argument_already(node, global_buffer):
            continue
        sizes = _block_sizes(writer, global_buffer.get_name(), members, depth)
        if sizes is None:
            continue
        layout = global_buffer.get_layout()
        local = ir.Buffer(
            name=f"local_buffer_data_{first_index + len(pairs)}",
            layout=ir.FixedLayout(
                layout.device,
                layout.dtype,
                list(sizes),
                list(ir.FlexibleLayout.contiguous_strides(sizes)),
            ),
        )
        fusion_log.debug(
            "outer-block fusion %s: %s becomes a per-iteration local buffer %s",
            node.get_name(),
            global_buffer.get_name(),
            list(sizes),
        )
        pairs.append((local, global_buffer))
    return pairs


def _an_argument_already(node, buffer: ir.Buffer) -> bool:
    """Whether the kernel group passes ``buffer`` as an argument already.

    Only a failed merge attempt of ``node`` can have made it one (nothing
    else reads or writes a private intermediate).  A retry that localized
    it would still pass the buffer, which is then never allocated.
    """
    scheduling = V.graph.scheduler.get_backend(node.get_device())
    args = scheduling.kernel_group.args  # type: ignore[attr-defined]  # CppScheduling
    name = buffer.get_name()
    return any(
        name in names
        for names in (args.input_buffers, args.output_buffers, args.inplace_buffers)
    )


def _private_intermediate(writer, members) -> ir.Buffer | None:
    """The writer's single output when every user of it is in the fusion."""
    if writer.is_reduction() or len(writer.get_outputs()) != 1:
        return None
    output = writer.get_outputs()[0]
    member_names = {m.get_name() for m in members}
    if not output.users or any(
        getattr(user.node, "get_name", lambda: None)() not in member_names
        for user in output.users
    ):
        return None
    buffer = output.node
    if not isinstance(buffer, ir.ComputedBuffer):
        return None
    if buffer.get_name() in V.graph.removed_buffers:
        return None
    return buffer


def _block_sizes(writer, name: str, members, depth: int) -> tuple | None:
    """The writer's inner loop sizes when every access maps onto its block."""
    writes = (body_accesses(writer, depth, reads=False) or {}).get(name, [])
    if len(writes) != 1:
        return None
    (write,) = writes
    if not write.linear_in_outer:
        return None
    block = dense_block_size(write)
    if block is None or not outer_blocks_disjoint(write, block):
        return None
    inner_sizes = tuple(int(s) for s in write.inner_ranges.values())
    if math.prod(inner_sizes) != block:
        return None
    writer_vars = depth + len(inner_sizes)
    for reader in members:
        reads = body_accesses(reader, depth, reads=True)
        if reads is None:
            return None
        for read in reads.get(name, []):
            if depth + len(read.inner_ranges) > writer_vars:
                return None  # a loop variable the index rewriting would zero
            if not same_block(write, read):
                return None
    return inner_sizes
