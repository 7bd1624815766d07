"""Outer-loop fused nodes as one loop nest, and what a failed merge tries next."""
