# Transformer encoder written as plain functions over parameter dicts
# (JAX habit: no nn.Module, params are just a pytree of tensors).
import math

import torch

cfg = dict(vocab=64, d_model=32, n_heads=4, d_ff=64, n_layers=2, max_len=16, pad_id=0)


def dense_init(g, n_in, n_out):
    std = 1.0 / math.sqrt(n_in)
    return {
        "w": torch.randn(n_in, n_out, generator=g) * std,
        "b": torch.zeros(n_out),
    }


def init_params(seed, cfg):
    g = torch.Generator().manual_seed(seed)
    d, f = cfg["d_model"], cfg["d_ff"]
    layers = []
    for _ in range(cfg["n_layers"]):
        layers.append({
            "attn": {
                "q": dense_init(g, d, d),
                "k": dense_init(g, d, d),
                "v": dense_init(g, d, d),
                "o": dense_init(g, d, d),
            },
            "ln1": {"scale": torch.ones(d), "bias": torch.zeros(d)},
            "ffn": {"fc1": dense_init(g, d, f), "fc2": dense_init(g, f, d)},
            "ln2": {"scale": torch.ones(d), "bias": torch.zeros(d)},
        })
    return {
        "embed": torch.randn(cfg["vocab"], d, generator=g) * 0.02,
        "pos": torch.randn(cfg["max_len"], d, generator=g) * 0.02,
        "layers": layers,
    }


def dense(p, x):
    return x @ p["w"] + p["b"]


def layer_norm(params, x, eps=1e-5):
    mean = x.mean(1, keepdim=True)
    var = ((x - mean) ** 2).mean(1, keepdim=True)
    return params["scale"] * (x - mean) / torch.sqrt(var + eps) + params["bias"]


def mha(params, x, n_heads, mask=None):
    # x: [B, T, D]; mask: [B, 1, 1, T] with True = keep
    B, T, D = x.shape
    dh = D // n_heads

    def split(t):
        return t.reshape(B, T, n_heads, dh).transpose(1, 2)  # [B, H, T, dh]

    q = split(dense(params["q"], x))
    k = split(dense(params["k"], x))
    v = split(dense(params["v"], x))
    logits = q @ k.transpose(-1, -2) / math.sqrt(dh)  # [B, H, T, T]
    if mask is not None:
        logits = torch.where(mask, logits, torch.full_like(logits, -1e9))
    w = torch.softmax(logits, dim=-1)
    out = (w @ v).transpose(1, 2).reshape(B, T, D)
    return dense(params["o"], out)


def ffn(params, x):
    return dense(params["fc2"], torch.relu(dense(params["fc1"], x)))


def encoder_layer(params, x, mask):
    # post-LN, as in the original paper
    x = layer_norm(params["ln1"], x + mha(params["attn"], x, cfg["n_heads"], mask))
    x = layer_norm(params["ln2"], x + ffn(params["ffn"], x))
    return x


def padding_mask(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]


def forward(params, tokens, cfg):
    T = tokens.shape[1]
    x = params["embed"][tokens] * math.sqrt(cfg["d_model"]) + params["pos"][:T]
    mask = padding_mask(tokens, cfg["pad_id"])
    for lp in params["layers"]:
        x = encoder_layer(lp, x, mask)
    return x


# ---- demo -------------------------------------------------------------
params = init_params(0, cfg)
tokens = torch.tensor([
    [5, 17, 9, 33, 2, 0, 0, 0],
    [8, 4, 61, 12, 7, 19, 3, 2],
])
h = forward(params, tokens, cfg)
print("encoded:", tuple(h.shape))
print("mean |h| at real tokens:", h[tokens != cfg["pad_id"]].abs().mean().item())
