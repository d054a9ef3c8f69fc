"""Every private upstream name the package touches is declared in ``_compat`` and resolves.

A torch or Triton release that renames or removes one fails here, naming the
entry, instead of somewhere deep inside a compile.
"""

import pathlib
import re
import sys

import pytest
import torch

import inductor_fx_unbacked
from inductor_fx_unbacked import _compat

PACKAGE = pathlib.Path(inductor_fx_unbacked.__file__).parent
INSTALLED = ".".join(torch.__version__.split(".")[:2])


def checked_here(entry):
    return entry.on != "cuda" or torch.version.cuda is not None


def autotuner():
    """A live Inductor autotuner, as FX conversion imports it."""
    import triton
    import triton.language as tl
    from torch._inductor.runtime.hints import DeviceProperties
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    @triton.jit
    def kernel(x_ptr, XBLOCK: tl.constexpr):
        pass

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return CachingAutotuner(
        kernel,
        triton_meta={
            "signature": {"x_ptr": "*fp32"},
            "device": DeviceProperties.create(torch.device(device)),
            "constants": {},
        },
        configs=[triton.Config({"XBLOCK": 16})],
        save_cache_hook=None,
        mutated_arg_names=[],
        optimize_mem=True,
        heuristic_type=None,
    )


INSTANCES = {
    "torch.fx:Graph": torch.fx.Graph,
    "torch.nn:Module": torch.nn.Module,
    "torch._ops:OpOverload": lambda: torch.ops.aten.mm.out,
    "torch._inductor.runtime.triton_heuristics:CachingAutotuner": autotuner,
}


@pytest.mark.parametrize(
    "entry",
    [e for e in _compat.PRIVATE_NAMES if INSTALLED in e.checked_on or "Triton" in e.checked_on],
    ids=lambda e: f"{e.owner}.{e.name}",
)
def test_entry_resolves_on_the_installed_release(entry):
    if not checked_here(entry):
        pytest.skip("resolvable in CUDA builds of torch only")
    if entry.on == "worker":
        pytest.skip("set only on autotuners that a compile worker sends back")
    if entry.on == "instance":
        entry.resolve(INSTANCES[entry.owner]())
    else:
        entry.resolve()


def test_every_entry_names_the_releases_it_was_checked_on():
    for entry in _compat.PRIVATE_NAMES:
        assert re.search(r"\d+\.\d+", entry.checked_on), entry
        assert entry.on in ("class", "instance", "cuda", "worker"), entry
        if entry.on == "instance":
            assert entry.owner in INSTANCES, f"no instance to check {entry} on"


def test_a_missing_name_fails_loudly():
    with pytest.raises(AttributeError, match="_no_such_attribute"):
        _compat.Private("torch.fx:Graph", "_no_such_attribute").resolve()


def _module_names():
    return {name.rpartition(".")[2] for name in list(sys.modules)}


def _our_names():
    """Private names the package defines itself (functions, classes, attributes)."""
    ours = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        ours |= set(re.findall(r"^\s*(?:def|class)\s+(_\w+)", text, re.M))
        ours |= set(re.findall(r"\bself\.(_\w+)\s*(?::[^=\n]+)?=", text))
        ours |= set(re.findall(r"^(_\w+)\s*[:=]", text, re.M))
    return ours


def _undeclared_private_names(pattern: str) -> dict[str, str]:
    """Names that ``pattern`` finds in the package's code, neither declared in
    ``_compat``, nor ours, nor a module: each with where it is first used."""
    declared = {entry.name for entry in _compat.PRIVATE_NAMES}
    exempt = _our_names() | _module_names() | {p.stem for p in PACKAGE.rglob("*.py")}
    undeclared = {}
    for path in PACKAGE.rglob("*.py"):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0].replace("``", "")
            for name in re.findall(pattern, code):
                if name not in declared and name not in exempt:
                    undeclared.setdefault(name, f"{path.relative_to(PACKAGE)}:{lineno}")
    return undeclared


def test_every_private_upstream_name_used_is_declared():
    """``x._name`` anywhere in the package is ours, a module, or an entry in ``_compat``."""
    undeclared = _undeclared_private_names(r"\.(_[a-z]\w*)")
    assert not undeclared, f"private upstream names not declared in _compat: {undeclared}"


def test_every_private_upstream_name_used_by_string_is_declared():
    """``getattr(x, "_name")``, an overlay row's ``"_name"``: declared too."""
    undeclared = _undeclared_private_names(r"[\"'](_[a-z]\w*)[\"']")
    assert not undeclared, f"private upstream names not declared in _compat: {undeclared}"


def test_private_names_outside_compat_are_only_called_through_it():
    """The names the issue lists are reached through ``_compat``'s accessors only."""
    routed = ["._root", "._rename(", ".eval_slow(", "._make_launchers(", "._import_kernel("]
    routed += ["._format_kernel_definition(", "driver._active", ".compile_results[0]"]
    routed += ['"_reinterpret_tensor"', '"_empty_strided_', "import while_loop_dense"]
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "_compat":
            continue
        text = path.read_text()
        for name in routed:
            assert name not in text, f"{path.relative_to(PACKAGE)} uses {name} directly"
