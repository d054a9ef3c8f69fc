"""FX artifacts in Inductor's caches: their identity in the keys, and their stored form.

Inductor's FX graph cache and AOTAutograd's cache hand back a compiled artifact
whenever their key matches. The key holds Inductor's config, but not which
wrapper codegen ``register_backend_for_device`` installed, so without help a
program compiled once with the Python wrapper is served to ``fx_backend`` (no FX
graph, no checks), and the other way round.

Both keys hold the uuid of each device's custom backend pass (the
``device_custom_pass`` of ``register_backend_for_device``), the extension point
Inductor offers a backend for exactly this. ``fx_backend`` registers
:class:`FxArtifactIdentity` there: a pass that runs the pass registered before it
(if any) and whose uuid is the artifact's identity (``artifact/identity.py``).
A pass registered before it without a uuid makes the graph uncacheable: Inductor
bypasses both caches, as it does for its own custom passes without one.

``config.fx_wrapper`` is not used for this: in a JIT compile it also switches
Inductor to its C++-wrapper config (``get_cpp_wrapper_config``), which would
change the program, not only the key.

The stored form: Inductor stores a compiled graph as the source of a module
whose ``call(args)`` runs it, and on a hit loads that module again (and shows
its source in the ``output_code`` log). The FX backend's module holds, as
comments, what a cold compile shows (the FX graph and the code that runs it),
and one call that restores the artifact, named by the hash of its stored bytes
(``artifact/store.py``), which lie beside Inductor's own files in its cache dir.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

from torch._inductor.codecache import BypassFxGraphCache, PyCodeCache, write_atomic
from torch._inductor.runtime.cache_dir_utils import cache_dir
from torch._inductor.virtualized import V

from .. import runner as runners
from .._compat import CustomBackendPass
from ..artifact import store
from ..artifact.identity import artifact_identity
from ..artifact.store import ArtifactNotStored
from ..runner import cuda_graphs
from . import logs, overlay
from .recording import record_graphs, recording

log = logging.getLogger(__name__)


class FxArtifactIdentity(CustomBackendPass):
    """A device's custom backend pass whose uuid puts the FX backend into cache keys.

    It runs ``wrapped`` (the pass registered for the device before ``fx_backend``,
    if any) and otherwise leaves the graph alone.
    """

    def __init__(
        self,
        device: str,
        runner: str,
        runtime_asserts: bool,
        wrapped: Any,
        cuda_graphs: bool | None = None,
        sync_free: bool = True,
    ) -> None:
        self.device = device
        self.runner = runner
        self.runtime_asserts = runtime_asserts
        self.wrapped = wrapped
        self.cuda_graphs = cuda_graphs
        self.sync_free = sync_free

    def __call__(self, graph: Any) -> None:
        if self.wrapped is not None:
            self.wrapped(graph)

    def uuid(self) -> Any:
        wrapped_uuid = None
        if self.wrapped is not None:
            uuid = getattr(self.wrapped, "uuid", None)
            wrapped_uuid = uuid() if callable(uuid) else None
            if wrapped_uuid is None:
                # Inductor bypasses its caches for its own passes without a uuid.
                raise BypassFxGraphCache(
                    f"the custom backend pass registered for {self.device} before "
                    f"fx_backend ({self.wrapped!r}) has no uuid(), so the FX artifact's "
                    "identity is unknown"
                )
        return artifact_identity(
            backend="fx",
            device=self.device,
            interpreted=self.device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1",
            runner=self.runner,
            runtime_asserts=self.runtime_asserts,
            # What the callable replays is decided at compile time and stored with it.
            cuda_graphs=self.device == "cuda"
            and self.runner == "lowered"
            and cuda_graphs.wanted(self.cuda_graphs),
            # Reductions over masked selections computed without them.
            sync_free=self.sync_free,
            # Disabled inside fx_backend, upstream's converter writes the graph.
            overlay=overlay.is_enabled(),
            wrapped=wrapped_uuid,
        )


def _artifact_path(digest: str) -> str:
    return os.path.join(cache_dir(), "inductor_fx_unbacked", digest[:2], f"{digest}.fxa")


def store_artifact(gm: Any, runner: str, shown_source: str, *, cuda_graphs: bool = False) -> None:
    """Give Inductor the module that its caches store for the handed-out graph ``gm``,
    whose callable replays CUDA graphs if ``cuda_graphs`` (as the cold one does).

    A graph that cannot be stored gets a module that is a cache miss when loaded
    (:class:`ArtifactNotStored`), so it is compiled again, never served wrong.
    """
    try:
        data = store.dumps(gm, runner)
        digest = hashlib.sha256(data).hexdigest()
        write_atomic(_artifact_path(digest), data, make_dirs=True)
        source = _artifact_module(shown_source, digest, cuda_graphs)
    except (ArtifactNotStored, OSError) as e:
        log.info("Not storing the FX artifact in Inductor's caches: %s", e)
        source = unstorable_artifact_source(str(e))
    key, path = PyCodeCache.write(source)
    V.graph.cache_key, V.graph.cache_path, V.graph.cache_linemap = key, path, []


def _artifact_module(shown_source: str, digest: str, cuda_graphs: bool) -> str:
    shown = "\n".join(f"# {line}" if line else "#" for line in shown_source.splitlines())
    return (
        "# An FX artifact of inductor-fx-unbacked. What a cold compile showed:\n"
        f"{shown}\n\n"
        "from inductor_fx_unbacked.integration.caches import load_artifact\n"
        f"call = load_artifact({digest!r}, __file__, cuda_graphs={cuda_graphs!r})\n"
    )


def unstorable_artifact_source(reason: str) -> str:
    """The source of a module that, loaded from a cache, is a miss (see ArtifactNotStored)."""
    return (
        "# An FX artifact of inductor-fx-unbacked that could not be stored.\n"
        "from inductor_fx_unbacked.artifact.store import ArtifactNotStored\n"
        f"raise ArtifactNotStored({reason!r})\n"
    )


def load_artifact(digest: str, module_path: str, cuda_graphs: bool = False) -> Any:
    """Restore the FX artifact stored under ``digest`` and return its ``call(args)``,
    replaying CUDA graphs if ``cuda_graphs``.

    An artifact that cannot be restored is a cache miss (``ArtifactNotStored``): the
    program compiles again instead of failing; a missing or damaged file says so in
    a warning.
    """
    path = _artifact_path(digest)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ArtifactNotStored(f"the FX artifact {path} is missing: {e}") from e
    if hashlib.sha256(data).hexdigest() != digest:
        log.warning("The FX artifact %s is damaged; compiling again.", path)
        raise ArtifactNotStored(f"the FX artifact {path} does not match its hash")
    try:
        loaded = store.loads(data, with_values=recording())
    except ArtifactNotStored:
        raise
    except Exception as e:
        log.warning(
            "Could not restore an FX artifact from Inductor's cache (%s: %s); compiling again.",
            type(e).__name__,
            e,
        )
        raise ArtifactNotStored(f"the FX artifact could not be restored: {e}") from e
    record_graphs(loaded.graphs)
    run = runners.compile_graph(loaded.gm, loaded.runner, cuda_graphs=cuda_graphs)
    logs.show_graph(logs.graph_source(loaded.gm, run), module_path)

    def call(args: list[Any]) -> Any:
        return run(*args)

    return call
