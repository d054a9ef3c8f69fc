"""Installing and removing the overlay, and the fx_backend context."""

import os
import subprocess
import sys

import pytest
import torch
from torch._inductor import config
from torch._inductor.codegen import common

import inductor_fx_unbacked as ifx
from inductor_fx_unbacked.integration import overlay as _overlay


@pytest.fixture(autouse=True)
def overlay_disabled():
    ifx.disable()
    yield
    ifx.disable()


def current(patch):
    return patch.owner.__dict__.get(patch.name)


def function_of(attribute):
    """A staticmethod's or classmethod's function; any other attribute as it is."""
    return getattr(attribute, "__func__", attribute)


def inherited(patch):
    """What ``patch.owner`` inherits as ``patch.name`` from its bases."""
    return next(
        base.__dict__[patch.name] for base in patch.owner.__mro__[1:] if patch.name in base.__dict__
    )


def is_ours(patch, original):
    installed = current(patch)
    if patch.wraps:
        if original is None:  # wrapped as the owner inherits it
            original = inherited(patch)
        # A staticmethod or classmethod is wrapped as the same kind around its function.
        return type(installed) is type(original) and (
            function_of(installed).__wrapped__ is function_of(original)
        )
    return installed is patch.replacement


def test_disable_restores_identical_upstream_objects():
    originals = {(p.owner, p.name): current(p) for p in _overlay.patches()}
    ifx.enable()
    assert ifx.is_enabled()
    for patch in _overlay.patches():
        original = originals[(patch.owner, patch.name)]
        assert is_ours(patch, original)
        assert current(patch) is not original
    ifx.disable()
    assert not ifx.is_enabled()
    for patch in _overlay.patches():
        assert current(patch) is originals[(patch.owner, patch.name)]


def test_repeated_enable_and_disable_are_safe():
    originals = [current(p) for p in _overlay.patches()]
    ifx.enable()
    installed = [current(p) for p in _overlay.patches()]
    ifx.enable()
    assert [current(p) for p in _overlay.patches()] == installed
    assert all(is_ours(p, o) for p, o in zip(_overlay.patches(), originals))
    ifx.disable()
    ifx.disable()
    assert [current(p) for p in _overlay.patches()] == originals


def test_disable_under_a_patch_warns_and_enable_does_not_wrap_its_own_wrapper():
    """A patch of an overlay attribute that outlives the overlay (``patcher.stop()``
    after ``disable()``) puts the overlay's wrapper back; the next ``enable()``
    wraps upstream's method again, not that leftover, and ``disable()`` restores
    upstream's."""
    from unittest import mock

    from torch._inductor.codegen.wrapper_fxir import FxConverter

    upstream = vars(FxConverter)["generate"]
    ifx.enable()
    wrapper = vars(FxConverter)["generate"]
    patcher = mock.patch.object(FxConverter, "generate", lambda self: None)
    patcher.start()
    with pytest.warns(UserWarning, match=r"FxConverter\.generate was replaced after the overlay"):
        ifx.disable()
    patcher.stop()
    assert vars(FxConverter)["generate"] is wrapper  # what the patch saw, put back

    ifx.enable()
    assert vars(FxConverter)["generate"].__wrapped__ is upstream
    ifx.disable()
    assert vars(FxConverter)["generate"] is upstream


def test_enable_inside_a_patch_wraps_the_patch_and_disable_puts_it_back():
    """Upstream's tests patch ``FxConverter.generate`` around a compile; ``fx_backend``
    inside that patch enables the overlay around the patch and gives it back."""
    from unittest import mock

    from torch._inductor.codegen.wrapper_fxir import FxConverter

    upstream = vars(FxConverter)["generate"]

    def counting(self):
        return upstream(self)

    with mock.patch.object(FxConverter, "generate", counting):
        ifx.enable()
        assert vars(FxConverter)["generate"].__wrapped__ is counting
        ifx.disable()
        assert vars(FxConverter)["generate"] is counting
    assert vars(FxConverter)["generate"] is upstream


@pytest.mark.parametrize("version", ["2.9.1", "2.9.0+cu128", "2.16.0", "2.16.0a0+git1234"])
def test_unsupported_torch_version_is_refused(monkeypatch, version):
    monkeypatch.setattr(torch, "__version__", version)
    with pytest.raises(ifx.UnsupportedTorchVersionError, match=r"torch>=2\.10,<2\.16") as e:
        ifx.enable()
    assert version in str(e.value)
    assert not ifx.is_enabled()


@pytest.mark.parametrize(
    "version",
    ["2.10.0+cu128", "2.11.0", "2.12.1+cpu", "2.13.0", "2.14.1", "2.15.0", "2.15.0a0+git1"],
)
def test_supported_torch_versions_are_accepted(version):
    _overlay.check_torch_version(version)


def registration_state(device):
    return (
        common.device_codegens.get(device),
        common.custom_backend_passes.get(device),
        common.custom_backend_codegen_configs.get(device),
        config.cpu_backend,
        config.compile_threads,
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fx_backend_restores_registration_and_config_when_body_raises(device):
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU mode needs TRITON_INTERPRET=1")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    common.init_backend_registration()
    # Compile workers outside (the suite runs without them on CPU-only machines).
    with config.patch(compile_threads=2):
        before = registration_state(device)
        with pytest.raises(KeyError, match="from the body"):
            with ifx.fx_backend(device):
                assert ifx.is_enabled()
                codegen = common.device_codegens[device]
                assert codegen.wrapper_codegen is codegen.fx_wrapper_codegen
                assert codegen.wrapper_codegen.__name__.endswith("FxWrapperCodegen")
                assert config.cpu_backend == ("triton" if device == "cpu" else before[3])
                # The CPU mode starts no compile workers: interpreted kernels need none.
                assert config.compile_threads == (1 if device == "cpu" else before[4])
                raise KeyError("from the body")
        assert registration_state(device) == before
    assert not ifx.is_enabled()


def test_fx_backend_keeps_an_enabled_overlay_enabled():
    ifx.enable()
    with ifx.fx_backend("cuda" if torch.cuda.is_available() else "cpu"):
        pass
    assert ifx.is_enabled()


def test_cpu_mode_without_triton_interpret_is_refused(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    before = registration_state("cpu")
    with pytest.raises(ifx.InterpreterNotEnabledError, match="TRITON_INTERPRET=1"):
        with ifx.fx_backend("cpu"):
            pass
    assert registration_state("cpu") == before


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="'xpu'"):
        with ifx.fx_backend("xpu"):
            pass


@pytest.mark.parametrize(
    "device", ["cuda", "cuda:0", torch.device("cuda"), torch.device("cuda", 0)]
)
def test_fx_backend_takes_devices_and_indexed_devices(device):
    if torch.cuda.is_available():
        with ifx.fx_backend(device):
            assert common.device_codegens["cuda"].wrapper_codegen.__name__ == "FxWrapperCodegen"
    else:
        with pytest.raises(RuntimeError, match=r"has no CUDA device .* fx_backend\('cpu'\)"):
            with ifx.fx_backend(device):
                pass
        assert not ifx.is_enabled()


def test_fx_backend_takes_a_cpu_device_object():
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("CPU mode needs TRITON_INTERPRET=1")
    with ifx.fx_backend(torch.device("cpu")):
        assert config.cpu_backend == "triton"


def test_not_a_device_is_refused():
    with pytest.raises(ValueError, match="'gpu0', which is not a device"):
        with ifx.fx_backend("gpu0"):
            pass


@pytest.mark.parametrize(
    ("device", "suggestion"),
    [("gpu", "use 'cuda'"), ("gpu:1", "use 'cuda:1'"), ("cdua", "did you mean 'cuda'?")],
)
def test_a_gpu_named_otherwise_gets_cuda_suggested(device, suggestion):
    with pytest.raises(ValueError) as e:
        with ifx.fx_backend(device):
            pass
    message = str(e.value)
    assert suggestion in message
    # The supported devices, not every device type torch knows.
    assert "it supports 'cuda' and 'cpu'" in message
    assert "mkldnn" not in message


@pytest.mark.parametrize("device", ["tpu", "TPU:0", "xla", "hpu"])
def test_another_accelerator_is_refused_without_a_misleading_suggestion(device):
    """A TPU is no misspelt CPU: the error names what the backend targets instead."""
    with pytest.raises(ValueError) as e:
        with ifx.fx_backend(device):
            pass
    message = str(e.value)
    assert f"not {device!r}" in message and "CUDA GPUs" in message
    assert "did you mean" not in message


@pytest.mark.parametrize("device", ["cpu:1", torch.device("cpu", 2)])
def test_an_indexed_cpu_is_refused(device):
    with pytest.raises(ValueError, match="use 'cpu'"):
        with ifx.fx_backend(device):
            pass
    assert not ifx.is_enabled()


@pytest.mark.full
def test_the_cpu_mode_makes_triton_warn_of_nothing(tmp_path):
    """Triton 3.9 warns once per process that TRITON_DEFAULT_FP_FUSION is unset when a
    backend's options are parsed without FP fusion stated; Inductor's cache keys parse
    them for the CPU mode's stand-in target, where nothing is compiled. A fresh process
    (the warning is once per process) compiles and re-serves a program in the CPU mode."""
    from inductor_fx_unbacked import _compat

    if not (_compat.TRITON_WARNS_UNSET_FP_FUSION and _compat.INDUCTOR_KEYS_EXTERN_LIBS):
        pytest.skip("this Triton and torch never warn of it")
    if torch.cuda.is_available():
        pytest.skip("the CPU mode's own test")
    script = (
        "import torch, inductor_fx_unbacked as ifx\n"
        "torch._dynamo.config.capture_dynamic_output_shape_ops = True\n"
        "for _ in range(2):\n"
        "    torch._dynamo.reset()\n"
        "    x = torch.randn(8)\n"
        "    out = ifx.capture_fx_graphs(lambda x: x[x > 0] * 2, x, fullgraph=True).outputs\n"
        "    assert torch.equal(out, x[x > 0] * 2)\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(TRITON_INTERPRET="1", TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    env.pop("TRITON_DEFAULT_FP_FUSION", None)
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "ok"
    assert "TRITON_DEFAULT_FP_FUSION" not in done.stderr, done.stderr[-3000:]
