"""What a C++ kernel prints in its loops: accumulators, hoisted loads, stores."""
