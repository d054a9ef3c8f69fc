# Owner(s): ["module: inductor"]
"""A training step with a data-dependent loss, through the FX backend."""

import logging

import torch
from test_fxir_backend import FxirTestCase

import inductor_fx_unbacked as ifx


def masked_loss(x, w, y):
    pred = (x * w).sin()
    mask = y > 0
    return ((pred[mask] - y[mask]) ** 2).sum() / mask.sum()


class TrainingStepTest(FxirTestCase):
    def test_masked_loss_forward_and_backward_quietly(self):
        """Forward and backward match eager, and compiling prints no more than the
        default backend: no "failed to eagerly compile backwards" warning."""
        inputs = [
            (self.signed(16, 8), self.signed(16, 10, seed=1), self.signed(16, 5, seed=2)),
            (self.signed(16, 8, seed=3), self.signed(16, 6, seed=4), self.signed(16, 12, seed=5)),
        ]
        records = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = records.append
        # torch's loggers need not propagate, so listen on each of them.
        loggers = [
            logging.getLogger(name)
            for name in list(logging.root.manager.loggerDict)
            if name == "torch" or name.startswith("torch.")
        ]
        for logger in loggers:
            logger.addHandler(handler)
        try:
            with ifx.fx_backend(self.device), ifx.recording_graphs() as graphs:
                compiled = torch.compile(masked_loss, fullgraph=True)
                for x, w, y in inputs:
                    w_eager = w.clone().requires_grad_()
                    w_compiled = w.clone().requires_grad_()
                    expected = masked_loss(x, w_eager, y)
                    expected.backward()
                    loss = compiled(x, w_compiled, y)
                    loss.backward()
                    self.assertEqual(loss, expected)
                    self.assertEqual(w_compiled.grad, w_eager.grad)
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
        self.assertEqual([r.getMessage() for r in records], [])
        self.assertGreaterEqual(len(graphs), 2)  # forward and backward
