"""The conversion layer: wrapper IR to an FX graph, laid out like ``torch/_inductor/codegen``.

It knows nothing of caches, runners or how the backend is registered; it
imports only ``_compat`` from the rest of the package.
"""
