"""Lowerings and decompositions that the C++ backend's fusions depend on."""
