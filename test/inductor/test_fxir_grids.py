# Owner(s): ["module: inductor"]
"""Launch grids over unbacked lengths: a 2-D kernel over the rows of an empty selection.

A pointwise kernel over the rows of a selection of a symbolic-width tensor can be
tiled in two dimensions, its y range the unbacked row count. Its grid lets the y
programs overflow into z and divides the y count by the z count, which is 0 for an
empty selection: the graph's grid nodes and, on torch 2.10 and 2.11, upstream's
launcher divided by zero where eager returns an empty tensor. On a GPU Inductor
tiles such a kernel by itself; on CPU ``triton.prefer_nd_tiling`` asks for it.
"""

import torch
from cache_scenario import overlay_state
from test_fxir_backend import FxirTestCase, kernel_calls
from torch._inductor import config
from torch._inductor.runtime.triton_heuristics import Grid2DWithYZOverflow
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.testing._internal.common_utils import instantiate_parametrized_tests, parametrize

import inductor_fx_unbacked as ifx

TILED = {"triton.prefer_nd_tiling": True}


def selected_rows(x, k):
    rows = x.index_select(0, (k > 0).nonzero().squeeze(1))
    return rows.log() * 2, rows.sum(0)


def inputs(kept: int, device: str, width: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    """12 rows of ``width``, ``kept`` of them selected; NaN and -inf at the others."""
    g = torch.Generator().manual_seed(kept)
    x = torch.rand(12, width, generator=g)
    k = -torch.rand(12, generator=g) - 0.5
    k[torch.randperm(12, generator=g)[:kept]] = 1.0
    x[k < 0, 0] = float("nan")
    x[k < 0, 1] = -float("inf")
    return x.to(device), k.to(device)


def tiled_over_unbacked_rows(graphs) -> list[torch.fx.Node]:
    """The kernel calls whose y range is an unbacked row count."""
    return [
        node
        for node in kernel_calls(graphs)
        if isinstance(ynumel := node.kwargs["kwargs"].get("ynumel"), torch.fx.Node)
        and free_unbacked_symbols(ynumel.meta["val"])
    ]


@instantiate_parametrized_tests
class EmptyTiledSelectionTest(FxirTestCase):
    @parametrize("runner", ["graph", "lowered"])
    def test_torch_compile(self, runner):
        with (
            config.patch(TILED),
            ifx.fx_backend(self.device, runner=runner),
            ifx.recording_graphs() as graphs,
        ):
            compiled = torch.compile(selected_rows, dynamic=True, fullgraph=True)
            for kept, width in ((5, 3), (0, 3), (1, 4), (0, 5)):
                x, k = inputs(kept, self.device, width)
                got = compiled(x, k)
                self.assertEqual(got[0].shape, (kept, width))
                torch.testing.assert_close(got, selected_rows(x, k), equal_nan=True)
        self.assert_tiled(graphs)

    def test_direct_call(self):
        with config.patch(TILED):
            artifact = ifx.compile(selected_rows, *inputs(5, self.device), dynamic=True)
        for kept in (0, 1, 7):
            x, k = inputs(kept, self.device)
            torch.testing.assert_close(artifact(x, k), selected_rows(x, k), equal_nan=True)
        self.assert_tiled([artifact.graph])

    def assert_tiled(self, graphs):
        if tiled_over_unbacked_rows(graphs):
            return
        if torch.__version__ < "2.11":
            self.skipTest("torch 2.10 tiles no kernel over unbacked rows")
        self.fail("no kernel was tiled over the selection's rows")

    def test_the_launchers_grid_of_an_empty_y_range_launches_nothing(self):
        # The launcher's grid with the overlay, as the runner launches it.
        with overlay_state(enabled=True):
            grid = Grid2DWithYZOverflow({}, "python")
            grid.generate({"XBLOCK": 4, "YBLOCK": 16})
        self.assertEqual(grid.eval_slow({"xnumel": 6, "ynumel": 0})[1:], (0, 0))
        # Elsewhere the grid is upstream's: y programs of at most 65535 per z.
        x, y, z = grid.eval_slow({"xnumel": 6, "ynumel": 16 * 70000})
        self.assertEqual((x, z), (2, 2))
        self.assertGreaterEqual(y * z, 70000)
        self.assertLessEqual(y, 65535)


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
