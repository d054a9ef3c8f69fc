"""The demo's programs, the benchmarks' programs and an expert-parallel MoE layer.

Fixtures, not the product: nothing in the package's layers imports them, and
they are not part of the hash that keys Inductor's caches (``artifact/identity.py``).
"""
