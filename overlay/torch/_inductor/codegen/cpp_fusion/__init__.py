"""The C++ (CPU) backend's fusion work that is not in upstream's own files.

``codegen/cpp.py``, ``scheduler.py`` and the lowering files call into this
package from small hooks; each feature has one ``config.cpp`` flag, and with
every flag off the hooks give stock codegen.  Modules, by what they decide:

scheduling/   which nodes fuse and in which loop order (scheduler side):
              loop_ordering, block_fusion, block_tiles, block_prepend
outer_loop/   how an outer-loop fused node becomes one loop nest, and what
              a failed merge tries next: split, retile, fallbacks,
              shallower, regroup, block_local_buffers
emitters/     what a kernel prints inside its loops: accumulators,
              invariant_loads, streaming_stores, prefetch, kernel_helpers
lowering/     lowerings and decompositions the fusions depend on:
              softmax_reciprocal, group_norm_channel_sums,
              outer_reduction_blocks
costs         the cost model's constants and rules (imports nothing here)
nodes         questions about scheduler nodes that several features ask
flag_requirements
              which flag needs which: ``enabled(flag)`` is how a module asks
              whether its feature is on
speculation   whether a graph's tensors are large enough for the speculative
              analyses (loop ordering after fusion, block fusion, prefetch)

Upstream files import these modules at their top and call
``module.function``, so that a test or the fuzzer can wrap a function.  Two
modules are imported where they are called: outer_loop.retile subclasses a class of
codegen/cpp.py and outer_loop.fallbacks uses it, so a top-level import in
codegen/cpp.py would be a cycle.  The backend-neutral files (scheduler.py,
ir.py, lowering.py, decomposition.py, graph.py) import nothing here: they
ask ``BaseScheduling`` methods that ``CppScheduling`` overrides.
"""
