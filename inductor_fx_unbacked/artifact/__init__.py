"""The artifact layer: a converted FX graph plus everything it needs to run anywhere.

``kernels.py``: the kernels a handed-out graph owns; ``facts.py``: what the
runner needs to know of each node; ``store.py``: the stored form;
``identity.py``: what made an artifact, for cache keys. Imports the conversion
layer (``codegen/``) only.
"""
