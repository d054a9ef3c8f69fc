"""The runner's own kernels on disk, as Inductor keeps its: compiled once, then
loaded by every later process without Triton's compiler.

Inductor's cache stores each kernel of a graph with its binary and its static
launcher, so a warm process loads them in milliseconds. The runner's compaction
kernels (``compaction.py``) compile on their first call instead, through Triton's
JIT: a warm process found their binaries in Triton's cache, but only after Triton
hashed its own installation (``triton_key``, a third of a second) and built or
loaded a launcher for each. This store keeps the static launcher of each compiled
kernel, with its binary, in Inductor's cache dir (so that ``fresh_cache()`` and
``TORCHINDUCTOR_CACHE_DIR`` govern it as they govern Inductor's entries), keyed by
everything its binary depends on:

- the kernel's source, with the functions it calls (Triton's ``cache_key``);
- the dtypes and alignment of its arguments, and its constexprs;
- the device's compute capability;
- the torch release (the launcher's pickled form is torch's), Triton's build
  (``triton_key()``, as Inductor keys its own cache: a rebuilt Triton of the same
  version is another key), the ptxas version and the compile options (ptxas
  options, libdevice), and the environment variables that Triton says change a
  compile (``_compat.triton_compile_key``).

Inductor's ``force_disable_caches`` turns it off. An entry that cannot be read or
loaded is compiled again and replaced, and an entry that cannot be written is
left out; each logs why on ``TORCH_LOGS=inductor_fx_unbacked``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from typing import Any

import torch
from torch._inductor import config
from torch._inductor.runtime.cache_dir_utils import cache_dir

from .. import _compat

log = logging.getLogger(__name__)

#: Bumped when what an entry holds, or how it is keyed, changes.
STORE_FORMAT = 2


def _path(key: tuple[Any, ...]) -> str:
    digest = hashlib.sha256(repr((STORE_FORMAT, *key)).encode()).hexdigest()
    return os.path.join(cache_dir(), "inductor_fx_unbacked", "kernels", f"{digest}.launcher")


def entry_key(kernel: Any, specialization: Any, constexprs: dict[str, int], device: int) -> Any:
    """What a kernel's binary depends on (the module docstring's list), or None when
    the store is off."""
    if config.force_disable_caches:
        return None
    return (
        kernel.__name__,
        kernel.cache_key,
        specialization,
        sorted(constexprs.items()),
        torch.cuda.get_device_capability(device),
        torch.__version__,
        _compat.triton_compile_key(device),
        sorted(_compat.triton_cache_invalidating_env_vars().items()),
    )


def load(key: Any, device: int) -> Any:
    """The stored static launcher of ``key``, loaded on ``device``; None when there is
    none, or it cannot be read or loaded (logged: the kernel is compiled again)."""
    if key is None:
        return None
    path = _path(key)
    try:
        with open(path, "rb") as f:
            static = pickle.load(f)
    except FileNotFoundError:
        return None  # not stored yet: the first compile stores it
    except Exception as e:  # noqa: BLE001 - unreadable: compiled again and replaced
        log.info("Bypassing the stored launcher of %s at %s due to %r", key[0], path, e)
        return None
    if not _compat.load_static_launcher(static, device):
        log.info("Bypassing the stored launcher of %s at %s: it does not load", key[0], path)
        return None
    return static


def store(key: Any, static: Any) -> None:
    """Write ``static`` (a static launcher that holds its binary, not yet loaded)
    under ``key``, atomically: a reader sees a whole entry or none."""
    if key is None:
        return
    path = _path(key)
    try:
        data = pickle.dumps(static)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, path)
    except Exception as e:  # noqa: BLE001 - storing is an optimisation; the call goes on
        # A cache dir that cannot be written: the next process compiles again.
        log.info("Not storing the launcher of %s at %s due to %r", key[0], path, e)
