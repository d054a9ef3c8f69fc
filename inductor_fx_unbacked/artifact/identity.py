"""What made an FX artifact: the part of Inductor's cache keys that this package owns.

Inductor's FX graph cache and AOTAutograd's cache hand back a stored artifact
whenever their key matches. Their keys hold Inductor's config but not which
wrapper codegen produced the artifact, nor whether this package changed the
code the wrappers write. :func:`artifact_identity` names everything of ours that
changes an artifact; the integration layer puts it into both keys.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

#: Bumped whenever the stored form of an FX artifact changes.
ARTIFACT_FORMAT = 4

#: The folders of the package whose code makes or runs artifacts. The demo's
#: programs and the example layers (``demo/``) are fixtures, not the product:
#: editing them must not change every cache key.
PRODUCT_FOLDERS = ("_compat", "codegen", "artifact", "runner", "integration")


@functools.cache
def package_hash() -> str:
    """A hash of the package's version and of the source files that make or run artifacts."""
    from torch._inductor.custom_graph_pass import get_hash_for_files

    from .. import __version__

    root = Path(__file__).parents[1]
    files = sorted(
        str(path)
        for path in root.rglob("*.py")
        if (path.parent == root and path.name != "__main__.py")
        or path.relative_to(root).parts[0] in PRODUCT_FOLDERS
    )
    return get_hash_for_files(tuple(files), extra=__version__).hex()


def artifact_identity(**components: Any) -> tuple[Any, ...]:
    """The package's part of a cache key: the package and format, then ``components``
    (backend, device, runner, checks, overlay, ...) by name, in a fixed order."""
    return (
        "inductor-fx-unbacked",
        package_hash(),
        ARTIFACT_FORMAT,
        *sorted(components.items()),
    )
