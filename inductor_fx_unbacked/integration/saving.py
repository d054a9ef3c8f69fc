"""``ifx.save`` and ``ifx.load``: a compiled artifact in a file, by value.

What the package hands out saves: an ``ifx.compile`` artifact (with its
module's parameters and buffers as they are when saved), and any FX graph
(captured, recorded, an AOT module, their subgraphs).

The file is a header, then the payload. The header is a line naming the package,
then JSON: the file format, what was saved, the versions of the package, of torch,
of Triton and of the artifact format, and the payload's SHA-256. :func:`load`
reads and checks it before anything in the payload is unpickled: a file of other
versions is refused naming both, a damaged or foreign one as such. The payload is
a pickle, and loading it runs code the file names, as
``torch.load(weights_only=False)`` does: load only files you trust.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from typing import Any

from .. import __version__
from ..artifact import store
from .compiled import CompiledArtifact
from .direct_breaks import CompiledWithBreaks
from .logs import log

#: Bumped whenever the file's layout changes. Format 1 (a pickle of the header
#: and the payload) still loads: its header is read without running any code.
FILE_FORMAT = 2
_MAGIC = b"inductor_fx_unbacked artifact\n"
_HEADER_LIMIT = 1 << 16


class LoadError(RuntimeError):
    """A file that ``ifx.load`` cannot load here; says why and what to do."""


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write ``obj`` (an ``ifx.compile`` artifact or a handed-out FX graph) to ``path``."""
    if isinstance(obj, CompiledWithBreaks):
        obj.__reduce__()  # raises, saying why
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
    header = {
        "file_format": FILE_FORMAT,
        "kind": kind,
        "package": __version__,
        **_versions(),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    encoded = json.dumps(header, sort_keys=True).encode()
    with open(path, "wb") as f:
        f.write(_MAGIC + len(encoded).to_bytes(4, "big") + encoded + payload)


def load(path: str | os.PathLike[str]) -> Any:
    """Read what :func:`save` wrote to ``path``; its kernels import again (Triton's
    cache, where it has them, spares their compile). The header is checked before
    the payload is unpickled; unpickling runs code from the file: load only files
    you trust. Raises :class:`LoadError` saying what is wrong and what to do."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(_MAGIC):
        header, payload = _read_header(path, data)
    else:
        header, payload = _read_format_1(path, data)
    if header.get("file_format") not in (1, FILE_FORMAT) or _versions_of(header) != _versions():
        raise LoadError(
            f"{path} was saved with {_describe(header)}; this process has "
            f"{_describe({'file_format': FILE_FORMAT, 'package': __version__, **_versions()})}: "
            "compile it again here (or load it where those versions are installed)"
        )
    digest = header.get("sha256")
    if digest is not None and hashlib.sha256(payload).hexdigest() != digest:
        raise LoadError(f"{path} is damaged (its payload does not match its header): save it again")
    log.info("ifx.load(%s): %s", path, header)
    try:
        return pickle.loads(payload)  # noqa: S301 - the documented contract: trusted files
    except store.ArtifactNotStored as e:
        raise LoadError(f"{path}: {e}") from e
    except Exception as e:  # noqa: BLE001 - any unreadable payload is named so
        raise LoadError(
            f"{path} has a header of this version but its payload cannot be loaded "
            f"({type(e).__name__}: {e}): save it again"
        ) from e


def _read_header(path: Any, data: bytes) -> tuple[dict[str, Any], bytes]:
    start = len(_MAGIC) + 4
    length = int.from_bytes(data[len(_MAGIC) : start], "big")
    try:
        if length > _HEADER_LIMIT or len(data) < start + length:
            raise ValueError("the header is cut short")
        header = json.loads(data[start : start + length])
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except ValueError as e:
        raise LoadError(f"{path} is damaged ({e}): save it again") from e
    return header, data[start + length :]


class _NoGlobals(pickle.Unpickler):
    """Reads a format-1 file's outer pickle (dicts, strings, bytes, torch's version
    string) and nothing that would run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("torch.torch_version", "TorchVersion"):
            return str
        raise pickle.UnpicklingError(f"it names {module}.{name}")


def _read_format_1(path: Any, data: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        saved = _NoGlobals(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - anything but that pickle is foreign
        raise LoadError(f"{path} is not a file that ifx.save wrote ({e})") from e
    header = saved.get("header") if isinstance(saved, dict) else None
    payload = saved.get("payload") if isinstance(saved, dict) else None
    if not isinstance(header, dict) or header.get("inductor_fx_unbacked") is None:
        raise LoadError(f"{path} is not a file that ifx.save wrote")
    if not isinstance(payload, bytes):
        raise LoadError(f"{path} is damaged (it has no payload): save it again")
    versions = header.get("versions") if isinstance(header.get("versions"), dict) else {}
    return {
        "file_format": header["inductor_fx_unbacked"],
        "kind": header.get("kind"),
        "torch": versions.get("torch"),
        "triton": versions.get("triton"),
        "artifact_format": versions.get("format"),
    }, payload


def _versions() -> dict[str, str]:
    versions = store.versions()
    return {
        "torch": versions["torch"],
        "triton": versions["triton"],
        "artifact_format": versions["format"],
    }


def _versions_of(header: dict[str, Any]) -> dict[str, Any]:
    return {key: header.get(key) for key in ("torch", "triton", "artifact_format")}


def _describe(header: dict[str, Any]) -> str:
    package = f"inductor-fx-unbacked {header['package']}, " if header.get("package") else ""
    return (
        f"{package}torch {header.get('torch')} and Triton {header.get('triton')} (artifact "
        f"format {header.get('artifact_format')}, file format {header.get('file_format')})"
    )
