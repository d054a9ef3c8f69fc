"""``ifx.save`` and ``ifx.load``: a compiled artifact in a file, by value.

What the package hands out saves: an ``ifx.compile`` artifact (with its
module's parameters and buffers as they are when saved), and any FX graph
(captured, recorded, an AOT module, their subgraphs). The file says what made it:
its format, and the versions of torch, Triton and the artifact format; a file of
other versions is refused, naming both, before anything in it is loaded. Loading
unpickles, as ``torch.load(weights_only=False)`` does: load only files you trust.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from ..artifact import store
from .compiled import CompiledArtifact

#: Bumped whenever the file's layout changes.
FILE_FORMAT = 1
_MAGIC = "inductor_fx_unbacked"


class LoadError(RuntimeError):
    """A file that ``ifx.load`` cannot load here; says why and what to do."""


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` (an ``ifx.compile`` artifact or a handed-out FX graph) to ``path``."""
    if isinstance(obj, CompiledArtifact):
        kind = "compiled"
    elif isinstance(obj, store.HandedOutGraphModule):
        kind = "graph"
    else:
        raise TypeError(
            "ifx.save saves what the package hands out (an ifx.compile artifact, or an FX "
            f"graph from capture_fx_graphs, recording_graphs or an AOT compile), not {obj!r}"
        )
    payload = pickle.dumps(obj)
    header = {_MAGIC: FILE_FORMAT, "kind": kind, "versions": store.versions()}
    with open(path, "wb") as f:
        pickle.dump({"header": header, "payload": payload}, f)


def load(path: str | os.PathLike[str]) -> Any:
    """Read what :func:`save` wrote to ``path``; its kernels import again (Triton's
    cache, where it has them, spares their compile)."""
    with open(path, "rb") as f:
        try:
            saved = pickle.load(f)
        except Exception as e:  # noqa: BLE001 - any unreadable file is named so
            raise LoadError(f"{path} is not a file that ifx.save wrote: {e}") from e
    header = saved.get("header") if isinstance(saved, dict) else None
    if not isinstance(header, dict) or header.get(_MAGIC) is None:
        raise LoadError(f"{path} is not a file that ifx.save wrote")
    if header[_MAGIC] != FILE_FORMAT or header.get("versions") != store.versions():
        raise LoadError(
            f"{path} was saved with {_describe(header.get('versions'), header[_MAGIC])}; this "
            f"process has {_describe(store.versions(), FILE_FORMAT)}: compile it again here"
        )
    try:
        return pickle.loads(saved["payload"])
    except store.ArtifactNotStored as e:
        raise LoadError(f"{path}: {e}") from e


def _describe(versions: dict[str, str] | None, file_format: Any) -> str:
    if not versions:
        return f"an unknown version (file format {file_format})"
    return (
        f"torch {versions.get('torch')} and Triton {versions.get('triton')} (artifact format "
        f"{versions.get('format')}, file format {file_format})"
    )
