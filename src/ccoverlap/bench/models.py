"""A small GPT-style decoder and an MoE layer, in plain torch, written so tensor parallelism can
split them (separate q/k/v projections; heads derived from the local width)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.head_dim = d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x) for p in (self.q, self.k, self.v))
        heads = q.shape[-1] // self.head_dim  # local heads under tensor parallelism
        q, k, v = (t.view(b, s, heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, s, heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int, mlp: nn.Module | None = None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.mlp = Attention(d, heads), mlp or MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers: int, d: int, heads: int, vocab: int, mlp_factory=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads, mlp_factory() if mlp_factory else None) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.emb(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class MoE(nn.Module):
    """Top-1 routed experts spread over ranks: all-to-all dispatch, local experts, all-to-all combine.

    Each rank sends every other rank a fixed-capacity slice (tokens per rank / world), so the
    exchange sizes are static; tokens over capacity keep only the residual path. Every shape is
    static and nothing waits for the host (no .any(), .nonzero() or boolean indexing): a dropped
    token is written to a spare slot that is not sent, and each local expert runs over all the
    rows received, its output kept where the row is routed to it. That costs expert FLOPs: each
    expert computes world x capacity rows instead of its share, experts-per-rank times the MLP
    work of routing each row to one expert (2x at the default of 2 experts per rank).
    """

    def __init__(self, d: int, experts_per_rank: int, group=None):
        super().__init__()
        self.group = group
        self.world = dist.get_world_size(group)
        self.local = experts_per_rank
        self.gate = nn.Linear(d, experts_per_rank * self.world, bias=False)
        self.experts = nn.ModuleList(MLP(d) for _ in range(experts_per_rank))

    def forward(self, x):
        from torch.distributed.nn.functional import all_to_all_single

        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        n, d = tokens.shape
        prob, expert = F.softmax(self.gate(tokens), dim=-1).max(dim=-1)
        dest = expert // self.local
        cap = n // self.world
        # slot of each token in its destination's slice; over-capacity tokens go to the spare slot (world x cap)
        order = torch.argsort(dest * n + torch.arange(n, device=x.device))
        rank_in_dest = torch.empty_like(order)
        rank_in_dest[order] = torch.arange(n, device=x.device) - torch.searchsorted(dest[order], dest[order])
        keep = rank_in_dest < cap
        slot = torch.where(keep, dest * cap + rank_in_dest, self.world * cap)
        tag = (expert % self.local).to(x.dtype) + 1  # 0 marks an empty slot
        send = torch.zeros(self.world * cap + 1, d + 1, device=x.device, dtype=x.dtype)
        send = send.index_put((slot,), torch.cat([tokens, tag[:, None]], dim=-1))[:-1]
        recv = all_to_all_single(torch.empty_like(send), send, group=self.group)
        rows, which = recv[:, :d], recv[:, d].round().long() - 1
        out = sum(expert_mlp(rows) * (which == e).to(x.dtype)[:, None] for e, expert_mlp in enumerate(self.experts))
        back = all_to_all_single(torch.empty_like(out), out, group=self.group)
        # the spare slot reads a zero row: dropped tokens get nothing but the residual path
        return (F.pad(back, (0, 0, 0, 1))[slot] * prob[:, None]).reshape(shape)
