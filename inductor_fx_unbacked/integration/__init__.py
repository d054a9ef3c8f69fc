"""The integration layer: Inductor sees the FX backend through this.

``backend.py`` (``fx_backend``, the wrapper codegen), ``capture.py`` and
``recording.py`` (the graphs users receive), ``caches.py`` (Inductor's caches),
``overlay.py`` (the reversible table of what the package changes upstream),
``cpu_mode.py`` (Triton's interpreter), ``logs.py`` (logging). The public API is
re-exported by the package's ``__init__``.
"""
