"""Tiny Transformer encoder, ported from the Flax "Transformer from scratch" tutorial.

Parameters live in a nested dict (a "params tree") exactly like the Flax version,
with Dense kernels stored as (in_features, out_features), so `x @ kernel + bias`.
Everything is a pure function of (params, inputs), like `model.apply`.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

VOCAB = 64
D_MODEL = 32
N_HEADS = 4
D_MLP = 128
N_LAYERS = 2
MAX_LEN = 16
LN_EPS = 1e-6  # flax.linen.LayerNorm default


def dense_init(key, d_in, d_out):
    g = torch.Generator().manual_seed(key)
    # lecun_normal, like flax.linen.Dense
    kernel = torch.randn(d_in, d_out, generator=g) / math.sqrt(d_in)
    return {"kernel": kernel, "bias": torch.zeros(d_out)}


def ln_init(d):
    return {"scale": torch.ones(d), "bias": torch.zeros(d)}


def init_params(seed=0):
    params = {
        "embed": {"embedding": torch.randn(VOCAB, D_MODEL, generator=torch.Generator().manual_seed(seed)) * 0.02},
        "pos_embed": {"embedding": torch.randn(MAX_LEN, D_MODEL, generator=torch.Generator().manual_seed(seed + 1)) * 0.02},
    }
    key = seed + 10
    for i in range(N_LAYERS):
        layer = {
            "ln_0": ln_init(D_MODEL),
            "attn": {
                "query": dense_init(key + 0, D_MODEL, D_MODEL),
                "key": dense_init(key + 1, D_MODEL, D_MODEL),
                "value": dense_init(key + 2, D_MODEL, D_MODEL),
                "out": dense_init(key + 3, D_MODEL, D_MODEL),
            },
            "ln_1": ln_init(D_MODEL),
            "mlp": {
                "Dense_0": dense_init(key + 4, D_MODEL, D_MLP),
                "Dense_1": dense_init(key + 5, D_MLP, D_MODEL),
            },
        }
        params[f"layers_{i}"] = layer
        key += 10
    params["encoder_norm"] = ln_init(D_MODEL)
    return params


def dense(p, x):
    return x @ p["kernel"] + p["bias"]


def layer_norm(p, x, eps=LN_EPS):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / torch.sqrt(var + eps) * p["scale"] + p["bias"]


def dot_product_attention(q, k, v, mask):
    # q, k, v: [batch, length, heads, head_dim] (flax layout)
    depth = q.shape[-1]
    q = q / math.sqrt(depth)
    logits = torch.einsum("bqhd,bkhd->bhqk", q, k)
    if mask is not None:
        big_neg = torch.finfo(logits.dtype).min
        logits = torch.where(mask, logits, big_neg)
    weights = F.softmax(logits, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


def multi_head_attention(p, x, mask):
    b, l, _ = x.shape
    head_dim = D_MODEL // N_HEADS
    q = dense(p["query"], x).reshape(b, l, N_HEADS, head_dim)
    k = dense(p["key"], x).reshape(b, l, N_HEADS, head_dim)
    v = dense(p["value"], x).reshape(b, l, N_HEADS, head_dim)
    y = dot_product_attention(q, k, v, mask)
    y = y.reshape(b, l, D_MODEL)
    return dense(p["out"], y)


def mlp_block(p, x):
    h = dense(p["Dense_0"], x)
    h = F.gelu(h, approximate="tanh")  # nn.gelu in flax is the tanh approximation
    return dense(p["Dense_1"], h)


def encoder_block(p, x, mask):
    y = layer_norm(p["ln_0"], x)
    y = multi_head_attention(p["attn"], y, mask)
    x = x + y
    y = layer_norm(p["ln_1"], x)
    y = mlp_block(p["mlp"], y)
    return x + y


def make_attention_mask(pad_mask):
    # pad_mask: [batch, length], True for real tokens -> [batch, 1, q, k]
    return pad_mask[:, None, None, :] & pad_mask[:, None, :, None]


def apply_fn(params, ids, mask):
    b, l = ids.shape
    x = params["embed"]["embedding"][ids]
    x = x + params["pos_embed"]["embedding"][None, :l]
    attn_mask = make_attention_mask(mask)
    for i in range(N_LAYERS):
        x = encoder_block(params[f"layers_{i}"], x, attn_mask)
    return layer_norm(params["encoder_norm"], x)


params = init_params(0)
ids = torch.tensor(np.array([[5, 9, 13, 2, 7, 0, 0, 0],
                             [3, 8, 21, 4, 11, 6, 19, 1]]))
mask = ids != 0
out = apply_fn(params, ids, mask)
print("encoded:", tuple(out.shape), float(out[mask].abs().mean()))
