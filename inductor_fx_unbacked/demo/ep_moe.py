"""An expert-parallel mixture-of-experts layer: data-dependent collectives.

Each of the ``world_size`` ranks holds ``experts_per_rank`` experts. A forward:

1. the router scores every token against every expert and picks the top ``k``
   (on raw logits, so that the CPU mode needs no ``exp``); the picked logits,
   made positive with ``relu`` and normalised by division, weight the experts;
2. the ``T * k`` (token, expert) assignments are sorted by expert, and the
   number per expert is exchanged with an ``all_to_all`` of counts, so that each
   rank learns how many tokens it receives from each rank for each local expert;
3. the tokens are dispatched with an ``all_to_all`` whose split sizes come from
   those counts (``.tolist()``: unbacked symbols when compiled);
4. each local expert runs two matmuls on its ragged batch (the tokens it got
   from every rank);
5. a second ``all_to_all``, with the splits swapped, returns the results, which
   are weighted and summed per token.

``bias`` is added to the logits for the choice of experts only (as in
auxiliary-loss-free load balancing), so that a test can steer every token away
from a rank, which then receives no tokens at all.

With a ``capacity``, the layer dispatches as capacity-limited MoE does instead:
each expert takes at most ``capacity`` assignments from each rank (the first in
token order; the others are dropped, and contribute nothing), in a buffer of
that many rows per expert, padded with zeros, and both ``all_to_all`` exchanges
have equal splits. No size comes to the host: the forward has no sync and no
unbacked symbol, and with a capacity of ``T * k`` nothing is dropped, so that it
computes what the exact layer does, on padded batches.

:func:`spawn_ranks` starts one process per rank (as ``torchrun`` would, without
it) for the tests and ``benchmarks/ep_moe.py``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn


class ExpertParallelMoE(nn.Module):
    """A top-``k`` MoE layer whose experts are spread over the ranks of ``group``.

    ``forward(x, bias)`` takes this rank's tokens ``x`` of shape ``(T, dim)`` and a
    selection bias of shape ``(experts,)``, and returns ``(T, dim)``. Every rank
    must call it (the collectives pair up); ``T`` may differ between ranks.
    ``activation`` runs between the two matmuls of an expert (``relu`` in the CPU
    tests, ``silu`` on GPU).
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        experts_per_rank: int,
        k: int,
        group: dist.ProcessGroup | None = None,
        activation=torch.relu,
        seed: int = 0,
        capacity: int | None = None,
    ) -> None:
        super().__init__()
        self.group = group if group is not None else dist.group.WORLD
        self.world_size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.experts_per_rank = experts_per_rank
        self.experts = experts_per_rank * self.world_size
        self.k = k
        self.activation = activation
        self.capacity = capacity
        # The router is replicated: the same weights on every rank.
        g = torch.Generator().manual_seed(seed)
        self.router = nn.Parameter(torch.randn(dim, self.experts, generator=g) / dim**0.5)
        # The experts are not: each rank initialises its own from its rank.
        g = torch.Generator().manual_seed(seed + 1 + self.rank)
        self.w_in = nn.Parameter(torch.randn(experts_per_rank, dim, hidden, generator=g) / dim**0.5)
        self.w_out = nn.Parameter(
            torch.randn(experts_per_rank, hidden, dim, generator=g) / hidden**0.5
        )

    def route(self, x: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The router's logits ``(T, experts)`` and the ``k`` experts each token goes to."""
        logits = x @ self.router
        return logits, torch.topk(logits + bias, self.k, dim=-1).indices

    def tokens_per_rank(self, x: torch.Tensor, bias: torch.Tensor) -> list[int]:
        """How many (token, expert) assignments of ``x`` go to each rank (eager)."""
        ranks = self.route(x, bias)[1] // self.experts_per_rank
        return torch.bincount(ranks.reshape(-1), minlength=self.world_size).tolist()

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        if self.capacity is not None:
            return self._padded_forward(x, bias)
        tokens, dim = x.shape
        world, local = self.world_size, self.experts_per_rank

        # 1. Route.
        logits, chosen = self.route(x, bias)
        scores = torch.relu(torch.gather(logits, 1, chosen)) + 1e-2
        weights = scores / scores.sum(dim=-1, keepdim=True)

        # 2. Sort the assignments by expert and exchange the counts per expert.
        expert_of = chosen.reshape(-1)
        order = torch.argsort(expert_of, stable=True)
        token_of = order // self.k
        send_counts = torch.zeros(self.experts, dtype=torch.int64, device=x.device)
        send_counts = send_counts.scatter_add(0, expert_of, torch.ones_like(expert_of))
        # recv_counts[r * local + j]: tokens that rank r sends to local expert j.
        recv_counts = funcol.all_to_all_single(send_counts, None, None, self.group)

        # 3. Dispatch. The last send count is implied by the others, so that the
        # sizes add up to T * k without a check that sympy cannot use.
        send_list = send_counts[:-1].tolist()
        send_list.append(tokens * self.k - sum(send_list))
        torch._check(send_list[-1] >= 0)
        recv_list = recv_counts.tolist()
        send_splits = [sum(send_list[r * local : (r + 1) * local]) for r in range(world)]
        recv_splits = [sum(recv_list[r * local : (r + 1) * local]) for r in range(world)]
        routed = funcol.all_to_all_single_autograd(
            x[token_of], recv_splits, send_splits, self.group
        )

        # 4. The local experts, each on all the tokens it received.
        chunks = torch.split(routed, recv_list)  # by (source rank, local expert)
        outputs = [None] * (world * local)
        for j in range(local):
            batch = torch.cat([chunks[r * local + j] for r in range(world)])
            hidden = self.activation(batch @ self.w_in[j]) @ self.w_out[j]
            pieces = torch.split(hidden, [recv_list[r * local + j] for r in range(world)])
            for r in range(world):
                outputs[r * local + j] = pieces[r]

        # 5. Combine: send the results back, weight them, sum them per token.
        returned = funcol.all_to_all_single_autograd(
            torch.cat(outputs), send_splits, recv_splits, self.group
        )
        weighted = returned * weights.reshape(-1)[order].unsqueeze(1)
        return torch.zeros_like(x).index_add(0, token_of, weighted)

    def slots(self, x: torch.Tensor, bias: torch.Tensor) -> dict[str, torch.Tensor]:
        """The padded dispatch's plan: the assignments in expert order (``order``, the
        token of each, ``token_of``), and the row of the send buffer each goes to
        (``slot``: ``expert * capacity`` plus its rank among the expert's, or the
        last row, ``experts * capacity``, for one dropped)."""
        assert self.capacity is not None, "slots() is the padded dispatch's"
        logits, chosen = self.route(x, bias)
        expert_of = chosen.reshape(-1)
        order = torch.argsort(expert_of, stable=True)
        sorted_experts = expert_of[order]
        counts = torch.zeros(self.experts, dtype=torch.int64, device=x.device)
        counts = counts.scatter_add(0, expert_of, torch.ones_like(expert_of))
        starts = torch.cumsum(counts, 0) - counts
        rank_in_expert = torch.arange(order.numel(), device=x.device) - starts[sorted_experts]
        kept = rank_in_expert < self.capacity
        dropped_row = self.experts * self.capacity
        slot = torch.where(kept, sorted_experts * self.capacity + rank_in_expert, dropped_row)
        return {"logits": logits, "chosen": chosen, "order": order, "slot": slot, "kept": kept}

    def _padded_forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        tokens, dim = x.shape
        world, local, capacity = self.world_size, self.experts_per_rank, self.capacity
        plan = self.slots(x, bias)
        order, slot = plan["order"], plan["slot"]
        token_of = order // self.k
        scores = torch.relu(torch.gather(plan["logits"], 1, plan["chosen"])) + 1e-2
        weights = scores / scores.sum(dim=-1, keepdim=True)

        # Dispatch: every rank sends local * capacity rows to every rank.
        rows = self.experts * capacity
        send = x.new_zeros(rows + 1, dim).index_put((slot,), x[token_of])[:rows]
        routed = funcol.all_to_all_single_autograd(send, None, None, self.group)

        # The local experts, each on its capacity rows from every rank.
        routed = routed.view(world, local, capacity, dim)
        outputs = []
        for j in range(local):
            batch = routed[:, j].reshape(world * capacity, dim)
            hidden = self.activation(batch @ self.w_in[j]) @ self.w_out[j]
            outputs.append(hidden.view(world, 1, capacity, dim))

        # Combine: the results go back to the rows they came from; a dropped
        # assignment reads the zero row after them.
        returned = funcol.all_to_all_single_autograd(
            torch.cat(outputs, 1).reshape(rows, dim), None, None, self.group
        )
        returned = torch.cat([returned, returned.new_zeros(1, dim)])
        weighted = returned[slot] * weights.reshape(-1)[order].unsqueeze(1)
        return torch.zeros_like(x).index_add(0, token_of, weighted)


#: Set in every process that spawn_ranks starts: NVLink SHARP (multicast) stays
#: off, as the machines this was tested on need.
MULTICAST_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


class RanksTimedOutError(RuntimeError):
    """The ranks that spawn_ranks started did not finish in time (they are killed)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn_ranks(
    worker: Callable[..., Any], world_size: int, args: tuple[Any, ...], timeout: float
) -> None:
    """Run ``worker(rank, world_size, init_method, *args)`` in ``world_size`` processes.

    ``init_method`` is a ``tcp://`` address on a free local port, for
    ``dist.init_process_group``. A rank that raises makes this raise
    ``torch.multiprocessing.ProcessRaisedException`` with its traceback (the
    other ranks are terminated); ranks still running after ``timeout`` seconds
    are killed and :class:`RanksTimedOutError` is raised, so that a hung
    collective cannot hang the caller.
    """
    import torch.multiprocessing as mp

    init_method = f"tcp://127.0.0.1:{free_port()}"
    saved = {name: os.environ.get(name) for name in MULTICAST_OFF}
    os.environ.update(MULTICAST_OFF)  # spawned processes inherit the environment
    try:
        context = mp.start_processes(
            worker,
            args=(world_size, init_method, *args),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    deadline = time.monotonic() + timeout
    while not context.join(timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
        if time.monotonic() > deadline:
            running = [p.pid for p in context.processes if p.is_alive()]
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join()
            raise RanksTimedOutError(
                f"{len(running)} of {world_size} ranks (pids {running}) were still running "
                f"after {timeout:.0f} s and were killed"
            )
