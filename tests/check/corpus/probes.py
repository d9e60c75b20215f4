"""How to run each corpus file: one `probe` per interface, with the same seed, weights and inputs
every time, returning what the file computes (outputs, loss, state_dict keys, a cached decode, a
checkpoint round trip). The corpus's sanity test runs a style file and each of its mutants through
its probe and requires the results to differ; it needs no checker.

Dropout is set above 0 where the file lets us (a config field, a constructor argument, the
module-level constant) and the modules are in eval mode, so a dropout that ignores the training
flag shows."""
from __future__ import annotations

import os
import tempfile

import torch


def _seed(s=0):
    torch.manual_seed(s)


def _x(*shape, s=1):
    g = torch.Generator().manual_seed(s)
    return torch.randn(*shape, generator=g)


def _tokens(B, T, vocab, s=2, low=1):
    g = torch.Generator().manual_seed(s)
    return torch.randint(low, vocab, (B, T), generator=g)


def _keys(module):
    return sorted(module.state_dict().keys())


def _roundtrip(m, make, save, load):
    """Save model `make(0)` through the file's save function, load it into `make(1)` through its load."""
    _seed(0)
    a = make()
    _seed(1)
    b = make()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt.pt")
        save(a, path)
        load(b, path)
    return {k: v.clone() for k, v in b.state_dict().items()}


def gpt_video(m):
    out = {}
    _seed()
    x = _x(2, 8, m.n_embd)
    h = m.Head(m.n_embd // m.n_head).eval()
    out["head"] = h(x)
    _seed()
    out["mha"] = m.MultiHeadAttention(m.n_head, m.n_embd // m.n_head).eval()(x)
    _seed()
    out["ffwd"] = m.FeedFoward(m.n_embd).eval()(x)
    _seed()
    out["block"] = m.Block(m.n_embd, n_head=m.n_head).eval()(x)
    _seed()
    model = m.GPTLanguageModel().eval()
    idx = _tokens(2, 8, m.vocab_size)
    logits, loss = model(idx, torch.roll(idx, -1, 1))
    out["logits"], out["loss"] = logits, loss
    out["load"] = _roundtrip(m, lambda: m.GPTLanguageModel(), m.save_checkpoint, m.load_checkpoint)
    return out


def minimal_gpt(m):
    import dataclasses
    cfg = dataclasses.replace(m.GPTConfig(), dropout=0.1)
    out = {}
    x = _x(2, 8, cfg.n_embd)
    _seed()
    out["attn"] = m.CausalSelfAttention(cfg).eval()(x)
    _seed()
    out["mlp"] = m.MLP(cfg).eval()(x)
    _seed()
    out["block"] = m.Block(cfg).eval()(x)
    _seed()
    model = m.GPT(cfg).eval()
    idx = _tokens(2, 8, cfg.vocab_size)
    tgt = torch.roll(idx, -1, 1)
    tgt[:, -1] = -1
    out["logits"], out["loss"] = model(idx, tgt)
    out["last"] = model(idx)[0]
    out["load"] = _roundtrip(m, lambda: m.GPT(cfg), m.save_checkpoint, m.load_checkpoint)
    return out


def _pad_labels(tokens, n_pad=2):
    labels = tokens.clone()
    labels[0, -n_pad:] = 0  # pad_id 0 at the end of the first row
    return labels


def llama_cn(m):
    args = m.ModelArgs()
    out = {}
    x = _x(2, 6, args.dim, s=3) * 0.3  # small values: eps placement shows
    _seed()
    out["norm"] = m.RMSNorm(args.dim, eps=args.norm_eps)(x)
    _seed()
    out["ffn"] = m.FeedForward(args.dim, 4 * args.dim, args.multiple_of)(x)
    _seed()
    model = m.Transformer(args).eval()
    toks = _tokens(2, 10, args.vocab_size)
    with torch.no_grad():
        out["full"], _ = model(toks, 0)
        out["prefill"], _ = model(toks[:, :6], 0)
        out["chunk"], _ = model(toks[:, 6:9], 6)   # several new tokens after a cache of 6
        out["step"], _ = model(toks[:, 9:10], 9)   # one new token
    model.train()
    out["logits_train"], out["loss"] = model(toks, 0, labels=_pad_labels(toks))
    _seed()
    blk = m.TransformerBlock(0, args).eval()
    with torch.no_grad():  # no mask here: files build it in forms of their own (additive, bool); the model covers it
        out["block"] = blk(x, 0, model.freqs_cis[:6], None)
    out["load"] = _roundtrip(m, lambda: m.Transformer(args), m.save_model, m.load_model)
    return out


def llama_hf(m):
    import dataclasses
    cfg = dataclasses.replace(m.LlamaConfig(), attention_dropout=0.1)
    out = {}
    x = _x(2, 6, cfg.hidden_size, s=3) * 0.3
    _seed()
    out["norm"] = m.LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)(x)
    _seed()
    out["mlp"] = m.LlamaMLP(cfg)(x)
    _seed()
    model = m.LlamaForCausalLM(cfg).eval()
    toks = _tokens(2, 10, cfg.vocab_size)
    with torch.no_grad():
        out["full"], _, _ = model(toks)
        logits, _, past = model(toks[:, :6], use_cache=True)
        out["prefill"] = logits
        out["chunk"], _, past = model(toks[:, 6:9], past_key_values=past, use_cache=True)
        out["step"], _, _ = model(toks[:, 9:10], past_key_values=past, use_cache=True)
    out["logits_l"], out["loss"], _ = model(toks, labels=_pad_labels(toks))
    out["load"] = _roundtrip(m, lambda: m.LlamaForCausalLM(cfg), m.save_pretrained, m.load_pretrained)
    return out


def d2l(m):
    out = {}
    X = _x(2, 6, 32)
    valid_lens = torch.tensor([3, 6])
    _seed()
    out["mha"] = m.MultiHeadAttention(32, 32, 32, 32, 4, 0.0).eval()(X, X, X, valid_lens)
    _seed()
    out["ffn"] = m.PositionWiseFFN(32, 64, 32)(X)
    _seed()
    out["block"] = m.EncoderBlock(32, 32, 32, 32, [32], 32, 64, 4, 0.0).eval()(X, valid_lens)
    _seed()
    enc = m.TransformerEncoder(50, 32, 32, 32, 32, [32], 32, 64, 4, 2, 0.0).eval()
    out["encoder"] = enc(_tokens(2, 6, 50), valid_lens)
    pe = m.PositionalEncoding(32, 0.0).eval()
    out["pe"] = pe(torch.zeros(1, 6, 32))
    out["pe_keys"] = _keys(pe)
    _seed()
    dec = m.DecoderBlock(32, 32, 32, 32, [32], 32, 64, 4, 0.0, 0)
    Y = _x(2, 5, 32, s=4)
    dec.train()  # d2l's decoder masks the future only while training (valid lens 1..T)
    out["dec_train"], _ = dec(Y, [X, valid_lens, [None]])
    dec.eval()  # and in prediction, one token at a time against the cached keys
    state = [X, valid_lens, [None]]
    steps = [dec(Y[:, t:t + 1], state)[0] for t in range(Y.shape[1])]
    out["dec_steps"] = torch.cat(steps, dim=1)
    return out


def annotated(m):
    out = {}
    x = _x(2, 6, 32) * 0.5
    src_mask = torch.ones(2, 1, 6, dtype=torch.bool)
    src_mask[0, 0, 4:] = False
    tgt_mask = src_mask & m.subsequent_mask(6)
    _seed()
    out["ln"] = m.LayerNorm(32)(x * 0.01)
    _seed()
    out["mha"] = m.MultiHeadedAttention(4, 32, 0.0).eval()(x, x, x, src_mask)
    _seed()
    enc, dec = m.make_model(dropout=0.0)
    enc.eval(), dec.eval()
    memory = enc(x, src_mask)
    out["memory"] = memory
    out["decoded"] = dec(_x(2, 6, 32, s=4), memory, src_mask, tgt_mask)
    out["sub"] = m.subsequent_mask(5)
    pe = m.PositionalEncoding(32, 0.0).eval()
    out["pe"] = pe(torch.zeros(1, 6, 32))
    out["pe_keys"] = _keys(pe)
    return out


def keras_port(m):
    out = {}
    toks = _tokens(2, 6, 50)
    toks[0, 4:] = 0
    x = _x(2, 6, m.d_model)
    pad = m.create_padding_mask(toks)
    look = torch.maximum(m.create_look_ahead_mask(6), pad)
    _seed()
    out["enc_layer"] = m.EncoderLayer(m.d_model, m.num_heads, m.dff, 0.0).eval()(x, pad)
    _seed()
    out["dec_layer"] = m.DecoderLayer(m.d_model, m.num_heads, m.dff, 0.0).eval()(_x(2, 6, m.d_model, s=5), x, look, pad)
    _seed()
    enc = m.Encoder(m.num_layers, m.d_model, m.num_heads, m.dff, 50, 100, 0.0).eval()
    out["encoder"] = enc(toks, pad)
    out["pe"] = m.positional_encoding(10, m.d_model)
    out["look"] = m.create_look_ahead_mask(5)
    return out


def einsum_zh(m):
    out = {}
    toks = _tokens(2, 6, 100)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, 4:] = 0
    x = _x(2, 6, 32) * 0.5
    _seed()
    out["ln"] = m.层归一化(32)(x * 0.01)
    _seed()
    out["layer"] = m.编码器层(dropout=0.0).eval()(x, mask)
    _seed()
    enc = m.编码器(dropout=0.0).eval()
    out["encoder"] = enc(toks, mask)
    out["pe_keys"] = _keys(m.位置编码(32))
    out["pe"] = m.位置编码(32)(torch.zeros(1, 6, 32))
    return out


def vit(m):
    out = {}
    x = _x(2, 5, 48)
    _seed()
    out["attn"] = m.Attention(48, num_heads=4, attn_drop=0.1).eval()(x)
    _seed()
    out["block"] = m.Block(48, 4, attn_drop=0.1).eval()(x)
    _seed()
    out["model"] = m.VisionTransformer(attn_drop_rate=0.1).eval()(_x(2, 3, 16, 16))
    return out


def seq_first(m):
    out = {}
    S, T, N, E = 6, 6, 2, 32  # T = S: a cross-attention reading the decoder still runs
    src = _tokens(S, N, 50)
    tgt = _tokens(T, N, 50, s=3)
    src_pad = torch.zeros(N, S, dtype=torch.bool)
    src_pad[0, 4:] = True
    x = _x(S, N, E)
    _seed()
    out["mha"] = m.MultiheadAttention(E, 4).eval()(x, x, x, key_padding_mask=src_pad)
    _seed()
    out["enc_layer"] = m.TransformerEncoderLayer(E, 4, 64, 0.0).eval()(x, None, src_pad)
    _seed()
    model = m.Seq2SeqTransformer(dropout=0.0).eval()
    out["model"] = model(src, tgt, src_pad)
    out["sub"] = m.generate_square_subsequent_mask(5)
    pe = m.PositionalEncoding(E, 0.0)
    out["pe"] = pe.eval()(torch.zeros(6, 1, E))
    out["pe_keys"] = _keys(pe)
    return out


PROBES = {f.__name__: f for f in (gpt_video, minimal_gpt, llama_cn, llama_hf, d2l, annotated, keras_port,
                                   einsum_zh, vit, seq_first)}


def differs(a, b) -> bool:
    """True when two probe results are not the same numbers (a NaN counts as a difference)."""
    if isinstance(a, dict):
        return a.keys() != b.keys() or any(differs(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) != len(b) or any(differs(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape:
            return True
        return not torch.equal(a.detach(), b.detach())
    return a != b


def gpt_zh(m):
    cfg = m.GPT配置()  # dropout 0.1 by default
    out = {}
    x = _x(2, 8, cfg.n_embd)
    _seed()
    out["attn"] = m.因果自注意力(cfg).eval()(x)
    _seed()
    out["block"] = m.解码块(cfg).eval()(x)
    _seed()
    model = m.GPT模型(cfg).eval()
    ids = _tokens(2, 8, cfg.vocab_size)
    ids[0, -2:] = cfg.pad_id
    out["logits"], out["loss"] = model(ids, 计算损失=True)
    out["load"] = _roundtrip(m, lambda: m.GPT模型(cfg), m.保存, m.加载)
    return out


PROBES["gpt_zh"] = gpt_zh

# each variant keeps the interface of one style, and runs through that style's probe
VARIANT_PROBE: dict[str, str] = {}
VARIANT_PROBE.update({
    "gpt_video_sdpa": "gpt_video", "gpt_video_einsum": "gpt_video", "gpt_video_order": "gpt_video",
    "gpt_video_gelu_bias": "gpt_video", "gpt_video_batched_heads": "gpt_video", "gpt_video_zh": "gpt_video",
    "minimal_gpt_flash": "minimal_gpt", "minimal_gpt_separate_qkv": "minimal_gpt", "minimal_gpt_nobias": "minimal_gpt",
    "minimal_gpt_additive_mask": "minimal_gpt", "minimal_gpt_tanh_gelu": "minimal_gpt",
    "llama_cn_sdpa": "llama_cn", "llama_cn_mha": "llama_cn", "llama_cn_repeat_interleave": "llama_cn",
    "llama_cn_real_rope": "llama_cn", "llama_cn_bool_mask": "llama_cn",
    "llama_hf_sdpa": "llama_hf", "llama_hf_fused": "llama_hf", "llama_hf_float_mask": "llama_hf",
    "d2l_bias": "d2l", "d2l_zh": "d2l", "annotated_post_ln": "annotated", "annotated_inf_fill": "annotated",
    "keras_port_halves": "keras_port", "keras_port_inf": "keras_port",
    "einsum_zh_pre_ln": "einsum_zh", "einsum_zh_fused": "einsum_zh", "einsum_zh_bool_mask": "einsum_zh",
    "vit_separate_qkv": "vit", "vit_sdpa": "vit", "vit_einsum": "vit",
    "seq_first_float_mask": "seq_first", "seq_first_per_head": "seq_first", "seq_first_sdpa": "seq_first",
    "gpt_zh_manual": "gpt_zh", "gpt_zh_split": "gpt_zh", "gpt_video_sizes": "gpt_video",
    "llama_tiny_flash": "llama_tiny", "bert_zh_sdpa": "bert_zh", "bert_zh_bool_mask": "bert_zh",
    "llama_minimind_sdpa": "llama_minimind", "llama_minimind_interleaved": "llama_minimind",
    # held out (measured before the checker saw them), like the last four styles
    "llama_cn_mqa": "llama_cn", "gpt_video_where": "gpt_video", "llama_hf_mha": "llama_hf",
})

# variants that only rewrite their style's code (same parameters, same order): the same numbers
NUMERIC_TWINS = ("annotated_inf_fill", "d2l_zh", "einsum_zh_bool_mask", "gpt_video_einsum", "gpt_video_sdpa",
                 "gpt_video_zh", "gpt_zh_manual", "gpt_zh_split", "keras_port_inf", "llama_cn_bool_mask",
                 "llama_cn_real_rope", "llama_cn_repeat_interleave", "llama_cn_sdpa", "llama_hf_float_mask",
                 "llama_hf_sdpa", "minimal_gpt_flash", "seq_first_sdpa", "vit_einsum", "vit_sdpa", "llama_tiny_flash",
                 "bert_zh_sdpa", "bert_zh_bool_mask", "llama_minimind_sdpa")


def close(a, b, atol=1e-5) -> list[str]:
    """The keys at which two probe results differ beyond float32 rounding."""
    if isinstance(a, dict):
        return [f"{k}.{x}" if x else k for k in a for x in (close(a[k], b.get(k), atol) if k in b else ["missing"])]
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape:
            return [""]
        if a.is_floating_point():
            return [] if torch.allclose(a, b, atol=atol, rtol=1e-4, equal_nan=True) else [""]
        return [] if torch.equal(a, b) else [""]
    return [] if a == b else [""]


def llama_tiny(m):
    args = m.ModelArgs()  # dropout 0.1 by default
    out = {}
    x = _x(2, 6, args.dim, s=3) * 0.3
    _seed()
    out["norm"] = m.RMSNorm(args.dim, eps=args.norm_eps)(x)
    _seed()
    out["ffn"] = m.FeedForward(args.dim, None, args.multiple_of, 0.0)(x)
    _seed()
    model = m.Transformer(args).eval()
    toks = _tokens(2, 10, args.vocab_size)
    targets = torch.roll(toks, -1, 1)
    targets[0, -3:] = -1
    out["logits"] = model(toks, targets)
    out["loss"] = model.last_loss
    out["last"] = model(toks)
    _seed()
    blk = m.TransformerBlock(0, args).eval()
    out["block"] = blk(x, model.freqs_cos[:6], model.freqs_sin[:6])
    return out


PROBES["llama_tiny"] = llama_tiny


def bert_zh(m):
    cfg = m.BertConfig()  # dropout 0.1 by default
    out = {}
    ids = _tokens(2, 7, cfg.vocab_size)
    ids[0, 5:] = 0
    mask = (ids != 0).long()
    _seed()
    model = m.BertModel(cfg).eval()
    out["model"] = model(ids, mask)
    ext = model.get_extended_attention_mask(mask)
    x = _x(2, 7, cfg.hidden_size)
    _seed()
    out["self_attn"] = m.BertSelfAttention(cfg).eval()(x, ext)
    _seed()
    out["layer"] = m.BertLayer(cfg).eval()(x, ext)
    return out


PROBES["bert_zh"] = bert_zh


def llama_minimind(m):
    cfg = m.MiniConfig(dropout=0.1)
    out = {}
    x = _x(2, 6, cfg.hidden_size, s=3) * 0.3
    _seed()
    out["norm"] = m.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)(x)
    _seed()
    out["mlp"] = m.FeedForward(m.MiniConfig())(x)
    _seed()
    model = m.MiniMindForCausalLM(cfg).eval()
    toks = _tokens(2, 10, cfg.vocab_size)
    pad = torch.ones(2, 10, dtype=torch.long)
    pad[1, :2] = 0  # left padding in the second row
    with torch.no_grad():
        out["full"], _, _ = model(toks)
        out["padded"], _, _ = model(toks, attention_mask=pad)
        logits, _, past = model(toks[:, :6], use_cache=True)
        out["prefill"] = logits
        out["chunk"], _, past = model(toks[:, 6:9], past_key_values=past, use_cache=True)
        out["step"], _, _ = model(toks[:, 9:10], past_key_values=past, use_cache=True)
    out["logits_l"], out["loss"], _ = model(toks, labels=_pad_labels(toks))
    return out


PROBES["llama_minimind"] = llama_minimind


def nlp_tutorial_zh(m):
    out = {}
    src = _tokens(2, 6, m.src_vocab_size)
    src[0, 4:] = 0
    tgt = _tokens(2, 6, m.tgt_vocab_size, s=3)  # as long as the source: a cross-attention on itself runs
    tgt[1, 4:] = 0
    x = _x(2, 6, m.d_model)
    pad = m.get_attn_pad_mask(src, src)
    _seed()
    out["mha"] = m.MultiHeadAttention()(x, x, x, pad)[0]
    _seed()
    out["enc_layer"] = m.EncoderLayer()(x, pad)[0]
    _seed()
    model = m.Transformer().eval()
    out["logits"] = model(src, tgt)
    out["sub"] = m.get_attn_subsequence_mask(tgt)
    pe = m.PositionalEncoding(m.d_model).eval()
    out["pe"] = pe(torch.zeros(6, 1, m.d_model))
    out["pe_keys"] = _keys(pe)
    return out


PROBES["nlp_tutorial_zh"] = nlp_tutorial_zh


def mingpt_cfg(m):
    cfg = m.GPTConfig(60, 16)  # dropout 0.1 by default
    out = {}
    x = _x(2, 8, cfg.n_embd)
    _seed()
    out["attn"] = m.CausalSelfAttention(cfg).eval()(x)
    _seed()
    out["block"] = m.Block(cfg).eval()(x)
    _seed()
    model = m.GPT(cfg).eval()
    model.pos_emb.data.normal_(0, 0.02, generator=torch.Generator().manual_seed(5))  # zeros at init: positions unseen
    idx = _tokens(2, 8, 60)
    out["logits"], out["loss"] = model(idx, torch.roll(idx, -1, 1))
    return out


PROBES["mingpt_cfg"] = mingpt_cfg


def wide_heads(m):
    out = {}
    x = _x(2, 7, 32)
    _seed()
    out["attn"] = m.SelfAttention(32, heads=4, mask=True)(x)
    _seed()
    out["attn_unmasked"] = m.SelfAttention(32, heads=4)(x)
    _seed()
    out["block"] = m.TransformerBlock(32, heads=4, mask=True)(x)
    _seed()
    out["model"] = m.GTransformer()(_tokens(2, 7, 50))
    return out


PROBES["wide_heads"] = wide_heads


def torch_mha(m):
    out = {}
    x = _x(2, 7, m.D_MODEL)
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), diagonal=1)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    _seed()
    out["block"] = m.DecoderBlock(dropout=0.0).eval()(x, causal, pad)
    _seed()
    model = m.TinyLM(dropout=0.0).eval()
    ids = _tokens(2, 9, m.VOCAB)
    ids[0, 6:] = m.PAD
    out["logits"] = model(ids)
    out["loss"] = model.loss(ids)
    return out


PROBES["torch_mha"] = torch_mha
