"""Benchmarks and GPU runs of inductor-fx-unbacked.

Run each as a module from the repository root, against the package as installed
(or with the checkout on ``PYTHONPATH``)::

    python -m benchmarks.gpu --parts tests,data-dependent --budget-s 520 --out DIR
    python -m benchmarks.data_dependent --device cpu --quick

``benchmarks.harness`` holds what every script shares: the environment header,
child processes with fresh cache dirs and a time limit, and a report written as
it goes. ``benchmarks.gpu`` is the one entry point for a GPU machine.
"""
