# ruff: noqa: E501 - the programs are source text, one input tuple a line
"""Hand-written data-dependent programs, as users write them, with the values users
keep at the positions a mask drops: padding labels and ids, NaN and inf rows, zero
divisors, extreme integers, negative exponents; selections of 0 and 1 elements.

They complement the generated families (``fuzz_programs.py``) with library
functions and patterns the generator does not write: embeddings and one-hot of
kept ids, cross-entropy with class weights and label smoothing, ``ignore_index``
among the kept labels, negative indices that are valid, modules with parameters
that require grad, 2-D and 3-D masks, a mask over columns, sorting, median and
``kthvalue``, bucketing, ``scatter_reduce``, ``unique_consecutive``, integer
overflow, and programs Dynamo breaks into several graphs. Each is ``(source, reduces)``: a source defining ``program`` and three
input tuples ``INPUTS``, and whether it reduces or scans (looser float tolerances).
"""

P: dict[str, tuple[str, bool]] = {}

P["embedding_padding_ids"] = (
    """
class E(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
    def forward(self, ids, m):
        return self.emb(ids[m]).sum(0)
program = E()
INPUTS = [
 (torch.tensor([1, -1, 9, 100, 3, 10**9]), torch.tensor([True, False, True, False, True, False])),
 (torch.tensor([1, -1, 9, 100, 3, 10**9]), torch.tensor([False]*6)),
 (torch.tensor([0, 5, 9, 100, 3, -7]), torch.tensor([True, True, False, False, False, False])),
]""",
    True,
)

P["embedding_padding_ids_tokens"] = (
    """
class E(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
    def forward(self, ids):
        m = (ids >= 0) & (ids < 10)
        return self.emb(ids[m]).mean()
program = E()
INPUTS = [(torch.tensor([1, -1, 9, 100, 3, 10**9]),), (torch.tensor([-5, -1, 90, 100, 33, 10**9]),), (torch.tensor([4, -1, 90, 100, 33, 10**9]),)]
""",
    True,
)

P["one_hot_kept"] = (
    """
def program(labels):
    m = (labels >= 0) & (labels < 5)
    return torch.nn.functional.one_hot(labels[m], 5).sum(0)
INPUTS = [(torch.tensor([1, -1, 4, 5, 3, 255]),), (torch.tensor([-1, -1, 40, 5, 30, 255]),), (torch.tensor([0, -100, 4, 5, 3, 2]),)]
""",
    True,
)

P["var_std_small"] = (
    """
def program(x, m):
    s = x[m]
    return s.var(), s.std(), s.mean()
INPUTS = [
 (torch.tensor([1.0, float('nan'), 3.0, float('inf')]), torch.tensor([True, False, False, False])),
 (torch.tensor([1.0, float('nan'), 3.0, float('inf')]), torch.tensor([False, False, False, False])),
 (torch.tensor([1.0, float('nan'), 3.0, float('inf')]), torch.tensor([True, False, True, False])),
]""",
    True,
)

P["negative_valid_indices"] = (
    """
def program(x, idx):
    m = (idx >= -x.shape[0]) & (idx < x.shape[0])
    return x[idx[m]] * 2, x.index_select(0, idx[m] % x.shape[0]).sum()
INPUTS = [
 (torch.arange(5.0), torch.tensor([-1, 2, 100, -3, -6, 4])),
 (torch.arange(5.0), torch.tensor([-10, 20, 100, -30, -6, 40])),
 (torch.arange(5.0), torch.tensor([-5, 0, 100, -30, -6, 4])),
]""",
    True,
)

P["argmax_selection_nan_outside"] = (
    """
def program(x, m):
    s = x[m]
    return s.argmax(), s.argmin(), s.max()
INPUTS = [
 (torch.tensor([1.0, float('nan'), 3.0, 3.0, float('inf'), -float('inf')]), torch.tensor([True, False, True, True, False, False])),
 (torch.tensor([1.0, float('nan'), 3.0, 3.0, float('inf'), -float('inf')]), torch.tensor([True, False, False, False, False, False])),
 (torch.tensor([7.0, float('nan'), 3.0, 3.0, float('inf'), -float('inf')]), torch.tensor([True, True, True, True, False, True])),
]""",
    False,
)

P["int32_sum_overflow"] = (
    """
def program(x, m):
    return x[m].sum(), x[m].cumsum(0), (x[m] * 2).prod()
INPUTS = [
 (torch.tensor([2**31 - 1, 2**31 - 1, -2**31, 5], dtype=torch.int32), torch.tensor([True, True, False, True])),
 (torch.tensor([2**31 - 1, 2**31 - 1, -2**31, 5], dtype=torch.int32), torch.tensor([False, False, False, False])),
 (torch.tensor([2**31 - 1, 2**31 - 1, -2**31, 5], dtype=torch.int32), torch.tensor([True, True, True, True])),
]""",
    True,
)

P["logsumexp_empty"] = (
    """
def program(x, m):
    return x[m].logsumexp(0), x[m].exp().sum(), x[m].norm()
INPUTS = [
 (torch.tensor([1.0, 1000.0, 3.0, float('nan')]), torch.tensor([True, False, True, False])),
 (torch.tensor([1.0, 1000.0, 3.0, float('nan')]), torch.tensor([False, False, False, False])),
 (torch.tensor([1.0, 1000.0, 3.0, float('nan')]), torch.tensor([False, False, True, False])),
]""",
    True,
)

P["module_layernorm_linear"] = (
    """
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(4)
        self.lin = torch.nn.Linear(4, 3)
    def forward(self, x, keep):
        return self.lin(self.norm(x[keep])).sum(0)
program = M()
X = [[1.0, 2.0, 3.0, 4.0], [float('nan')]*4, [float('inf'), 0.0, 1.0, 2.0], [0.5, -0.5, 2.0, 1.0], [5.0, 5.0, 5.0, 5.0]]
INPUTS = [
 (torch.tensor(X), torch.tensor([True, False, False, True, False])),
 (torch.tensor(X), torch.tensor([False, False, False, False, False])),
 (torch.tensor(X), torch.tensor([False, False, False, True, False])),
]""",
    True,
)

P["masked_assign_then_sum"] = (
    """
def program(x, m):
    y = x.clone()
    y[m] = 0.0
    return y.sum(), y[~m].mean()
INPUTS = [
 (torch.tensor([1.0, float('nan'), 3.0, float('inf')]), torch.tensor([False, True, False, True])),
 (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([False, False, False, False])),
 (torch.tensor([1.0, float('nan'), 3.0, 4.0]), torch.tensor([True, True, True, False])),
]""",
    True,
)

P["column_mask"] = (
    """
def program(x, m):
    return x[:, m].sum(), x[:, m].sum(1), x[:, m]
X = [[1.0, float('nan'), 3.0], [4.0, float('inf'), 6.0]]
INPUTS = [
 (torch.tensor(X), torch.tensor([True, False, True])),
 (torch.tensor(X), torch.tensor([False, False, False])),
 (torch.tensor(X), torch.tensor([False, False, True])),
]""",
    True,
)

P["mask_2d"] = (
    """
def program(x):
    m = x > 0
    return x[m].sum(), torch.sqrt(x[m]).mean(), x[m].log().cumsum(0)
INPUTS = [
 (torch.tensor([[1.0, -1.0], [-4.0, 9.0]]),),
 (torch.tensor([[-1.0, -1.0], [-4.0, -9.0]]),),
 (torch.tensor([[-1.0, -1.0], [4.0, -9.0]]),),
]""",
    True,
)

P["mask_3d_rows"] = (
    """
def program(x, m):
    return x[m].sum(0), x[m].mean(), x[m][:, 0]
X = torch.arange(24.0).reshape(4, 3, 2)
INPUTS = [(X, torch.tensor([True, False, True, False])), (X, torch.tensor([False]*4)), (X, torch.tensor([False, False, False, True]))]
""",
    True,
)

P["normalise_by_selection_sum"] = (
    """
def program(x, m):
    s = x[m]
    return s / s.sum(), (s - s.mean()) / s.std()
INPUTS = [
 (torch.tensor([1.0, 0.0, 3.0, float('nan'), 2.0]), torch.tensor([True, False, True, False, True])),
 (torch.tensor([1.0, 0.0, 3.0, float('nan'), 2.0]), torch.tensor([False, False, False, False, False])),
 (torch.tensor([1.0, 0.0, 3.0, float('nan'), 2.0]), torch.tensor([False, False, True, False, False])),
]""",
    True,
)

P["cross_entropy_weight_smoothing"] = (
    """
def program(logits, labels):
    W = torch.tensor([1.0, 2.0, 0.5], device=logits.device)
    m = (labels >= 0) & (labels < 3)
    return (torch.nn.functional.cross_entropy(logits[m], labels[m], weight=W, reduction='sum'),
            torch.nn.functional.cross_entropy(logits[m], labels[m], label_smoothing=0.1, reduction='sum'))
L = [[1.0, 2.0, 3.0], [float('nan'), 0.0, 1.0], [0.5, 0.5, -1.0], [float('inf'), 1.0, 1.0]]
INPUTS = [
 (torch.tensor(L), torch.tensor([2, -1, 0, 255])),
 (torch.tensor(L), torch.tensor([-100, -1, 10**12, 255])),
 (torch.tensor(L), torch.tensor([-100, -1, 1, 255])),
]""",
    True,
)

P["nll_ignore_index_kept"] = (
    """
def program(logp, labels):
    m = labels != -1
    return torch.nn.functional.nll_loss(logp[m], labels[m], ignore_index=7, reduction='sum')
L = [[-1.0, -2.0, -3.0], [float('nan'), 0.0, 1.0], [-0.5, -0.5, -1.0], [-2.0, -1.0, -1.0]]
INPUTS = [
 (torch.tensor(L), torch.tensor([2, -1, 7, 1])),
 (torch.tensor(L), torch.tensor([-1, -1, 7, -1])),
 (torch.tensor(L), torch.tensor([0, -1, -1, -1])),
]""",
    True,
)

P["bucketize_selection"] = (
    """
def program(x, m):
    B = torch.tensor([0.0, 1.0, 2.0], device=x.device)
    return torch.bucketize(x[m], B).sum(), torch.searchsorted(B, x[m])
INPUTS = [
 (torch.tensor([0.5, float('nan'), 1.5, float('inf'), 3.0]), torch.tensor([True, False, True, False, True])),
 (torch.tensor([0.5, float('nan'), 1.5, float('inf'), 3.0]), torch.tensor([False]*5)),
 (torch.tensor([0.5, float('nan'), 1.5, float('inf'), 3.0]), torch.tensor([False, False, True, False, False])),
]""",
    True,
)

P["float_to_int_outside"] = (
    """
def program(x, m):
    return x[m].to(torch.int32).sum(), x[m].long().cumsum(0)
INPUTS = [
 (torch.tensor([1.5, float('nan'), 3e30, float('inf'), -2.5]), torch.tensor([True, False, False, False, True])),
 (torch.tensor([1.5, float('nan'), 3e30, float('inf'), -2.5]), torch.tensor([False]*5)),
 (torch.tensor([1.5, float('nan'), 3e30, float('inf'), -2.5]), torch.tensor([True, False, False, False, False])),
]""",
    True,
)

P["bf16_selection_cumsum_mean"] = (
    """
def program(x, m):
    return x[m].cumsum(0), x[m].mean(), x[m].sum(dtype=torch.float32)
X = torch.tensor([1.0, float('nan'), 3.0, 65504.0, -2.5, 0.1], dtype=torch.bfloat16)
INPUTS = [(X, torch.tensor([True, False, True, False, True, True])), (X, torch.tensor([False]*6)), (X, torch.tensor([False, False, False, False, False, True]))]
""",
    True,
)

P["median_kthvalue"] = (
    """
def program(x, m):
    s = x[m]
    return s.sort().values, s.median(), s.kthvalue(1).values
INPUTS = [
 (torch.tensor([5.0, float('nan'), 3.0, 1.0, 3.0]), torch.tensor([True, False, True, True, False])),
 (torch.tensor([5.0, float('nan'), 3.0, 1.0, 3.0]), torch.tensor([True, False, False, False, False])),
 (torch.tensor([5.0, float('nan'), 3.0, 1.0, 3.0]), torch.tensor([True, False, True, True, True])),
]""",
    True,
)

P["softmax_all_neg_inf"] = (
    """
def program(x, m):
    return x[m].softmax(0), x[m].log_softmax(0).sum()
INPUTS = [
 (torch.tensor([-float('inf'), float('nan'), -float('inf'), 2.0]), torch.tensor([True, False, True, False])),
 (torch.tensor([-float('inf'), float('nan'), -float('inf'), 2.0]), torch.tensor([True, False, True, True])),
 (torch.tensor([-float('inf'), float('nan'), -float('inf'), 2.0]), torch.tensor([False, False, False, True])),
]""",
    True,
)

P["take_along_dim_labels"] = (
    """
def program(scores, labels):
    m = (labels >= 0) & (labels < scores.shape[1])
    s = scores[m]
    return torch.take_along_dim(s, labels[m][:, None], 1).sum(), (s.argmax(1) == labels[m]).float().mean()
S = [[1.0, 2.0], [3.0, 4.0], [float('nan'), 6.0], [7.0, 8.0]]
INPUTS = [
 (torch.tensor(S), torch.tensor([1, -1, 0, 2])),
 (torch.tensor(S), torch.tensor([5, -1, -100, 2])),
 (torch.tensor(S), torch.tensor([5, 1, -100, 2])),
]""",
    True,
)

P["index_by_selection_then_scatter_max"] = (
    """
def program(src, idx, m):
    out = torch.full((4,), -1.0, device=src.device)
    return out.scatter_reduce(0, idx[m], src[m], reduce='amax', include_self=True)
INPUTS = [
 (torch.tensor([1.0, float('nan'), 3.0, 4.0]), torch.tensor([0, 100, 3, -50]), torch.tensor([True, False, True, False])),
 (torch.tensor([1.0, float('nan'), 3.0, 4.0]), torch.tensor([0, 100, 3, -50]), torch.tensor([False]*4)),
 (torch.tensor([1.0, float('nan'), 3.0, 4.0]), torch.tensor([2, 100, 2, 1]), torch.tensor([True, False, True, True])),
]""",
    False,
)

P["where_index_tuple_2d"] = (
    """
def program(x):
    r, c = torch.where(x > 1)
    return x[r, c].sum(), r * 10 + c, torch.nonzero(x > 1, as_tuple=True)[1].float().mean()
INPUTS = [(torch.tensor([[1.0, 2.0], [3.0, 0.0]]),), (torch.tensor([[1.0, 0.0], [0.0, 0.0]]),), (torch.tensor([[1.0, 0.0], [5.0, 0.0]]),)]
""",
    True,
)

P["item_scalar_scale"] = (
    """
def program(x, m):
    n = m.sum().item()
    torch._check(n >= 0)
    return x[m] / max(n, 1), x[m].sum() / (n + 1)
INPUTS = [
 (torch.tensor([1.0, 2.0, float('nan')]), torch.tensor([True, True, False])),
 (torch.tensor([1.0, 2.0, float('nan')]), torch.tensor([False, False, False])),
 (torch.tensor([1.0, 2.0, float('nan')]), torch.tensor([True, False, False])),
]""",
    True,
)

P["rows_where_any_nan_dropped"] = (
    """
def program(x):
    keep = ~torch.isnan(x).any(1)
    y = x[keep]
    return y.sum(0), (y / y.norm(dim=1, keepdim=True)).sum(0)
INPUTS = [
 (torch.tensor([[1.0, 2.0], [float('nan'), 1.0], [0.0, 3.0]]),),
 (torch.tensor([[float('nan'), 2.0], [float('nan'), 1.0], [0.0, float('nan')]]),),
 (torch.tensor([[float('nan'), 2.0], [3.0, 4.0], [0.0, float('nan')]]),),
]""",
    True,
)

P["int_div_rows_counts"] = (
    """
def program(total, count):
    m = count > 0
    return (total[m] // count[m]).sum(), torch.div(total[m], count[m], rounding_mode='trunc'), (total[m] % count[m]).max()
INPUTS = [
 (torch.tensor([7, -8, 9, -2**63], dtype=torch.int64), torch.tensor([2, 0, 4, -1], dtype=torch.int64)),
 (torch.tensor([7, -8, 9, -2**63], dtype=torch.int64), torch.tensor([2, 0, -4, -1], dtype=torch.int64)),
 (torch.tensor([7, -8, 9, -2**63], dtype=torch.int64), torch.tensor([2, 3, 4, -1], dtype=torch.int64)),
]""",
    True,
)

P["sigmoid_bce_selection"] = (
    """
def program(logits, target):
    m = target >= 0
    return torch.nn.functional.binary_cross_entropy_with_logits(logits[m], target[m].float(), reduction='sum')
INPUTS = [
 (torch.tensor([1.0, float('nan'), -3.0, 1e30]), torch.tensor([1, -1, 0, -1])),
 (torch.tensor([1.0, float('nan'), -3.0, 1e30]), torch.tensor([-1, -1, -1, -1])),
 (torch.tensor([1.0, float('nan'), -3.0, 1e30]), torch.tensor([-1, -1, 1, -1])),
]""",
    True,
)

P["unique_consecutive_sel"] = (
    """
def program(x, m):
    return torch.unique_consecutive(x[m], return_counts=True)
INPUTS = [
 (torch.tensor([1, 1, 2, 2, 2, 3]), torch.tensor([True, True, False, True, True, True])),
 (torch.tensor([1, 1, 2, 2, 2, 3]), torch.tensor([False]*6)),
 (torch.tensor([1, 1, 2, 2, 2, 3]), torch.tensor([True] + [False]*5)),
]""",
    False,
)

P["cat_selections"] = (
    """
def program(a, b):
    sa, sb = a[a > 0], b[b > 0]
    c = torch.cat([sa, sb])
    return c.sum(), c, torch.stack([sa.sum(), sb.sum()])
INPUTS = [
 (torch.tensor([1.0, -1.0, 2.0]), torch.tensor([-3.0, 4.0])),
 (torch.tensor([-1.0, -1.0, -2.0]), torch.tensor([-3.0, -4.0])),
 (torch.tensor([-1.0, 5.0, -2.0]), torch.tensor([3.0, 4.0])),
]""",
    True,
)

P["pow_int_negative_exponent_outside"] = (
    """
def program(b, e):
    m = e >= 0
    return (b[m] ** e[m]).sum(), torch.pow(2, e[m]).sum()
INPUTS = [
 (torch.tensor([2, 3, 0, 5]), torch.tensor([3, -1, -2, 0])),
 (torch.tensor([2, 3, 0, 5]), torch.tensor([-3, -1, -2, -5])),
 (torch.tensor([2, 3, 0, 5]), torch.tensor([-3, 2, -2, -5])),
]""",
    True,
)

P["half_overflow_selection"] = (
    """
def program(x, m):
    return (x[m] * 1000).sum(), x[m].float().sum(), x[m].square().mean()
X = torch.tensor([60000.0, float('inf'), 1.0, -60000.0, 2.0], dtype=torch.float16)
INPUTS = [(X, torch.tensor([True, True, False, False, True])), (X, torch.tensor([False]*5)), (X, torch.tensor([False, False, True, False, True]))]
""",
    True,
)

P["bool_selection_ops"] = (
    """
def program(b, m):
    s = b[m]
    return s.sum(), s.any(), s.all(), s.int().cumsum(0), (~s).nonzero()
INPUTS = [
 (torch.tensor([True, False, True, True]), torch.tensor([True, True, False, True])),
 (torch.tensor([True, False, True, True]), torch.tensor([False]*4)),
 (torch.tensor([True, False, True, True]), torch.tensor([False, True, False, False])),
]""",
    False,
)

P["gather_rows_by_kept_indices_2d"] = (
    """
def program(table, idx):
    m = (idx >= 0) & (idx < table.shape[0])
    rows = table[idx[m]]
    return rows.sum(0), torch.nn.functional.embedding(idx[m], table).mean(0)
T = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
INPUTS = [
 (torch.tensor(T), torch.tensor([2, -1, 0, 3, 10**15])),
 (torch.tensor(T), torch.tensor([-2, -1, 9, 3, 10**15])),
 (torch.tensor(T), torch.tensor([-2, 1, 9, 3, 10**15])),
]""",
    True,
)

# Programs Dynamo breaks into several graphs (ifx.compile refuses them for one graph
# and takes them with fullgraph=False): a loop over the experts a batch routes to, as
# transformers' MoE blocks write it, a Python branch on a count, a split by counts read
# to the host. Experts that no token routes to, and a branch taken on one input only.

P["moe_loop_over_routed_experts"] = (
    """
class MoE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(4, 3)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))
    def forward(self, x):
        weights, chosen = self.router(x).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        hit = torch.zeros(3, dtype=torch.long, device=x.device).index_add_(0, chosen.flatten(), torch.ones_like(chosen.flatten()))
        for e in (hit > 0).nonzero().flatten().tolist():
            token, slot = (chosen == e).nonzero(as_tuple=True)
            out = out.index_add(0, token, self.experts[e](x[token]) * weights[token, slot, None])
        return out
program = MoE()
X = [[1.0, 0.0, -1.0, 2.0], [0.5, 0.5, 0.5, 0.5], [-3.0, 1.0, 0.0, 0.0], [0.0, -2.0, 4.0, 1.0], [2.0, 2.0, -2.0, -2.0]]
INPUTS = [
 (torch.tensor(X),),
 (torch.tensor(X) * -1,),
 (torch.tensor([X[0]] * 5),),
]""",
    True,
)

P["branch_on_selected_count"] = (
    """
def program(x, m):
    n = m.sum().item()
    if n > 2:
        return x[m].log().sum()
    return x.clamp(min=0).sum() + n
INPUTS = [
 (torch.tensor([1.0, -1.0, 2.0, 0.0, 3.0]), torch.tensor([True, False, True, False, True])),
 (torch.tensor([1.0, -1.0, 2.0, 0.0, 3.0]), torch.tensor([False]*5)),
 (torch.tensor([1.0, -1.0, 2.0, 0.0, 3.0]), torch.tensor([False, False, False, False, True])),
]""",
    True,
)

P["split_by_counts_to_host"] = (
    """
def program(x, counts):
    parts = torch.split(x, counts.tolist())
    return torch.stack([p.sum(0) for p in parts]), torch.stack([p.amax(0, keepdim=True).nan_to_num(-1.0).sum() if p.numel() else x.new_zeros(()) for p in parts])
X = [[1.0, 2.0], [float('nan'), 0.0], [3.0, -1.0], [0.5, 0.5]]
INPUTS = [
 (torch.tensor(X), torch.tensor([1, 0, 3])),
 (torch.tensor(X), torch.tensor([0, 0, 4])),
 (torch.tensor(X), torch.tensor([2, 2, 0])),
]""",
    True,
)
