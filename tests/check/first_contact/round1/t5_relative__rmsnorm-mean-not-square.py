"""T5-style encoder (encoder half only), re-typed from the paper + HF modeling_t5.

Notes to self:
  * T5 LayerNorm = RMS norm, scale only, no mean subtraction, no bias
  * NO 1/sqrt(d_kv) in attention -- it is folded into the init of q
  * position info = learned scalar bias per (bucket, head), shared by all layers,
    only the first layer owns the table
  * pre-norm residual blocks, final layer norm + dropout at the end
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL = 32
D_KV = 8
N_HEADS = 4
D_FF = 64
N_LAYERS = 2
VOCAB = 100
NUM_BUCKETS = 32
MAX_DISTANCE = 128
DROPOUT = 0.1
EPS = 1e-6


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.mean(-1, keepdim=True).pow(2)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    # half of the buckets are for exact increments in positions
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # the other half are for logarithmically bigger bins up to max_distance
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


class T5Attention(nn.Module):
    def __init__(self, has_relative_attention_bias=False):
        super().__init__()
        self.n_heads = N_HEADS
        self.d_kv = D_KV
        self.inner_dim = N_HEADS * D_KV
        self.q = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.k = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.v = nn.Linear(D_MODEL, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, D_MODEL, bias=False)
        self.has_relative_attention_bias = has_relative_attention_bias
        if has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(NUM_BUCKETS, N_HEADS)
        # T5 init: q gets the 1/sqrt(d_kv) instead of the scores
        nn.init.normal_(self.q.weight, std=(D_MODEL * D_KV) ** -0.5)
        nn.init.normal_(self.k.weight, std=D_MODEL ** -0.5)
        nn.init.normal_(self.v.weight, std=D_MODEL ** -0.5)
        nn.init.normal_(self.o.weight, std=self.inner_dim ** -0.5)

    def compute_bias(self, query_length, key_length):
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position  # (q, k)
        buckets = relative_position_bucket(
            relative_position, bidirectional=True, num_buckets=NUM_BUCKETS, max_distance=MAX_DISTANCE
        )
        values = self.relative_attention_bias(buckets.to(self.relative_attention_bias.weight.device))
        return values.permute([2, 0, 1]).unsqueeze(0)  # (1, heads, q, k)

    def forward(self, hidden_states, mask=None, position_bias=None):
        B, L, _ = hidden_states.shape

        def shape(s):
            return s.view(B, -1, self.n_heads, self.d_kv).transpose(1, 2)

        def unshape(s):
            return s.transpose(1, 2).contiguous().view(B, -1, self.inner_dim)

        q = shape(self.q(hidden_states))
        k = shape(self.k(hidden_states))
        v = shape(self.v(hidden_states))

        scores = torch.matmul(q, k.transpose(3, 2))  # no scaling, see notes
        if position_bias is None:
            position_bias = self.compute_bias(L, L)
            if mask is not None:
                position_bias = position_bias + mask  # (B, heads, L, L)
        scores = scores + position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = F.dropout(attn_weights, p=DROPOUT, training=self.training)
        attn_output = unshape(torch.matmul(attn_weights, v))
        return self.o(attn_output), position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(self, has_relative_attention_bias=False):
        super().__init__()
        self.SelfAttention = T5Attention(has_relative_attention_bias)
        self.layer_norm = T5LayerNorm(D_MODEL, eps=EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        normed = self.layer_norm(hidden_states)
        attn_out, position_bias = self.SelfAttention(normed, mask=attention_mask, position_bias=position_bias)
        hidden_states = hidden_states + self.dropout(attn_out)
        return hidden_states, position_bias


class T5DenseActDense(nn.Module):
    def __init__(self):
        super().__init__()
        self.wi = nn.Linear(D_MODEL, D_FF, bias=False)
        self.wo = nn.Linear(D_FF, D_MODEL, bias=False)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = F.relu(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return self.wo(hidden_states)


class T5LayerFF(nn.Module):
    def __init__(self):
        super().__init__()
        self.DenseReluDense = T5DenseActDense()
        self.layer_norm = T5LayerNorm(D_MODEL, eps=EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, hidden_states):
        forwarded = self.DenseReluDense(self.layer_norm(hidden_states))
        return hidden_states + self.dropout(forwarded)


class T5Block(nn.Module):
    def __init__(self, has_relative_attention_bias=False):
        super().__init__()
        self.layer = nn.ModuleList([T5LayerSelfAttention(has_relative_attention_bias), T5LayerFF()])

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        hidden_states, position_bias = self.layer[0](hidden_states, attention_mask, position_bias)
        hidden_states = self.layer[1](hidden_states)
        return hidden_states, position_bias


class T5Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, D_MODEL)
        self.block = nn.ModuleList([T5Block(has_relative_attention_bias=(i == 0)) for i in range(N_LAYERS)])
        self.final_layer_norm = T5LayerNorm(D_MODEL, eps=EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, input_ids, attention_mask):
        # attention_mask: (B, L) with 1 = real token, 0 = padding
        ext = attention_mask[:, None, None, :].to(torch.float32)
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        hidden_states = self.dropout(self.embed_tokens(input_ids))
        position_bias = None
        for layer in self.block:
            hidden_states, position_bias = layer(hidden_states, ext, position_bias)
        hidden_states = self.final_layer_norm(hidden_states)
        return self.dropout(hidden_states)
