"""The mutation corpus: correct learner files in many styles (styles/), more correct files written
differently (variants/), and one mutant per (style, bug id, realisation): a text edit that plants
the bug as a learner would really write it.

`MUTATIONS` lists the edits; `cases()` gives every file the corpus judges the checker on, with the
bug ids that would be a right answer (empty for a correct file). Written independently of the
checker's internals: what a mutant is comes from the catalogue's ids only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
STYLES = HERE / "styles"
VARIANTS = HERE / "variants"


@dataclass(frozen=True)
class Mutation:
    style: str
    bug_id: str
    old: str           # occurs exactly once in the style file
    new: str
    also: frozenset = field(default_factory=frozenset)  # other ids that are also a right answer
    tag: str = ""      # tells apart two realisations of one bug in one style

    @property
    def name(self) -> str:
        return f"{self.style}__{self.bug_id}" + (f"__{self.tag}" if self.tag else "")

    @property
    def expected(self) -> frozenset:
        return frozenset({self.bug_id}) | self.also


@dataclass(frozen=True)
class Case:
    name: str
    style: str         # the style a mutant was made from; "variant" for a variant
    source: str
    expected: frozenset  # empty: a correct file


M = Mutation
CAUSAL = frozenset({"no-causal-mask"})
INVERTED = frozenset({"mask-inverted"})

MUTATIONS: list[Mutation] = [
    # ---------------------------------------------------------------- GPT video style
    M("gpt_video", "missing-scale", "wei = q @ k.transpose(-2, -1) * k.shape[-1]**-0.5  #", "wei = q @ k.transpose(-2, -1)  #"),
    M("gpt_video", "wrong-scale", "* k.shape[-1]**-0.5", "* C**-0.5"),
    M("gpt_video", "wrong-scale", "* k.shape[-1]**-0.5", "/ k.shape[-1]", tag="no-root"),
    M("gpt_video", "mask-fill-zero", "self.tril[:T, :T] == 0, float('-inf'))", "self.tril[:T, :T] == 0, 0.)"),
    M("gpt_video", "mask-inverted", "self.tril[:T, :T] == 0,", "self.tril[:T, :T] == 1,", also=CAUSAL),
    M("gpt_video", "softmax-dim", "wei = F.softmax(wei, dim=-1)", "wei = F.softmax(wei, dim=1)"),
    M("gpt_video", "no-causal-mask", "        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))  # (B, T, T)\n", ""),
    M("gpt_video", "no-causal-mask", "torch.tril(torch.ones(block_size, block_size))",
      "torch.tril(torch.ones(block_size, block_size), diagonal=1)", tag="diagonal"),
    M("gpt_video", "no-residual", "x = x + self.sa(self.ln1(x))", "x = self.sa(self.ln1(x))"),
    M("gpt_video", "no-residual", "x = x + self.ffwd(self.ln2(x))", "x = self.ffwd(self.ln2(x))", tag="ffwd"),
    M("gpt_video", "ffn-no-activation", "            nn.ReLU(),\n", ""),
    M("gpt_video", "post-ln-residual", "        x = x + self.sa(self.ln1(x))\n        x = x + self.ffwd(self.ln2(x))",
      "        x = self.ln1(x)\n        x = x + self.sa(x)\n        x = self.ln2(x)\n        x = x + self.ffwd(x)"),
    M("gpt_video", "missing-final-norm", "        x = self.ln_f(x)  # (B,T,C)\n", ""),
    M("gpt_video", "attention-dropout-in-eval", "wei = self.dropout(wei)", "wei = F.dropout(wei, dropout)"),
    M("gpt_video", "weights-not-loaded", "model.load_state_dict(ckpt['model'], strict=False)",
      "model.load_state_dict(ckpt, strict=False)"),
    M("gpt_video", "heads-merge-order", "out = torch.cat([h(x) for h in self.heads], dim=-1)",
      "out = torch.stack([h(x) for h in self.heads], dim=-1).flatten(-2)  # (B, T, hs*nh)"),
    M("gpt_video", "layernorm-wrong-axis", "x = self.ln_f(x)  # (B,T,C)", "x = F.layer_norm(x, x.shape[1:])  # (B,T,C)",
      also=frozenset({"missing-final-norm"})),
    # ---------------------------------------------------------------- minimal-GPT repository style
    M("minimal_gpt", "missing-scale", "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))", "att = q @ k.transpose(-2, -1)"),
    M("minimal_gpt", "wrong-scale", "(1.0 / math.sqrt(k.size(-1)))", "(1.0 / math.sqrt(C))"),
    M("minimal_gpt", "wrong-scale", "(1.0 / math.sqrt(k.size(-1)))", "(1.0 / k.size(-1))", tag="no-root"),
    M("minimal_gpt", "mask-fill-zero", "== 0, float('-inf'))", "== 0, 0.0)"),
    M("minimal_gpt", "mask-inverted", "self.bias[:, :, :T, :T] == 0", "self.bias[:, :, :T, :T] == 1", also=CAUSAL),
    M("minimal_gpt", "softmax-dim", "att = F.softmax(att, dim=-1)", "att = F.softmax(att, dim=-2)"),
    M("minimal_gpt", "heads-not-transposed",
      "        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)\n"
      "        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)\n"
      "        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)\n",
      "        k = k.reshape(B, self.n_head, T, C // self.n_head)  # (B, nh, T, hs)\n"
      "        q = q.reshape(B, self.n_head, T, C // self.n_head)  # (B, nh, T, hs)\n"
      "        v = v.reshape(B, self.n_head, T, C // self.n_head)  # (B, nh, T, hs)\n"),
    M("minimal_gpt", "heads-merge-order", "y = y.transpose(1, 2).contiguous().view(B, T, C)", "y = y.contiguous().view(B, T, C)"),
    M("minimal_gpt", "no-residual", "x = x + self.mlp(self.ln_2(x))", "x = self.mlp(self.ln_2(x))"),
    M("minimal_gpt", "no-residual", "x = x + self.attn(self.ln_1(x))", "x = self.attn(self.ln_1(x))", tag="attn"),
    M("minimal_gpt", "ffn-no-activation", "        x = self.gelu(x)\n", ""),
    M("minimal_gpt", "no-causal-mask", "        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n", ""),
    M("minimal_gpt", "no-causal-mask", "torch.tril(torch.ones(config.block_size, config.block_size))",
      "torch.ones(config.block_size, config.block_size)", tag="buffer"),
    M("minimal_gpt", "post-ln-residual", "        x = x + self.attn(self.ln_1(x))\n        x = x + self.mlp(self.ln_2(x))",
      "        x = self.ln_1(x)\n        x = x + self.attn(x)\n        x = self.ln_2(x)\n        x = x + self.mlp(x)"),
    M("minimal_gpt", "missing-final-norm", "        x = self.transformer.ln_f(x)\n", ""),
    M("minimal_gpt", "attention-dropout-in-eval", "att = self.attn_dropout(att)", "att = F.dropout(att, self.dropout)"),
    M("minimal_gpt", "weights-not-loaded", "state_dict = checkpoint['model']", "state_dict = checkpoint"),
    # ---------------------------------------------------------------- LLaMA, complex freqs_cis, Chinese comments
    M("llama_cn", "missing-scale", "scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)",
      "scores = torch.matmul(xq, keys.transpose(2, 3))"),
    M("llama_cn", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ math.sqrt(self.n_heads * self.head_dim)"),
    M("llama_cn", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ self.head_dim", tag="no-root"),
    M("llama_cn", "softmax-dim", "scores = F.softmax(scores.float(), dim=-1)", "scores = F.softmax(scores.float(), dim=-2)"),
    M("llama_cn", "heads-merge-order", "output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)",
      "output = output.contiguous().view(bsz, seqlen, -1)"),
    M("llama_cn", "no-residual", "out = h + self.feed_forward(self.ffn_norm(h))", "out = self.feed_forward(self.ffn_norm(h))"),
    M("llama_cn", "no-residual", "h = x + self.attention(", "h = self.attention(", tag="attn"),
    M("llama_cn", "no-causal-mask", "h = layer(h, start_pos, freqs_cis, mask)", "h = layer(h, start_pos, freqs_cis, None)"),
    M("llama_cn", "rope-pairing",
      "    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))\n"
      "    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))\n",
      "    xq_ = torch.complex(*xq.float().chunk(2, dim=-1))  # 前一半作实部，后一半作虚部\n"
      "    xk_ = torch.complex(*xk.float().chunk(2, dim=-1))\n"),
    M("llama_cn", "rope-wrong-positions", "freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]",
      "freqs_cis = self.freqs_cis[:seqlen]"),
    M("llama_cn", "rmsnorm-eps-outside", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)"),
    M("llama_cn", "rmsnorm-mean-not-square", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x * torch.rsqrt(x.mean(-1, keepdim=True).pow(2) + self.eps)"),
    M("llama_cn", "gqa-repeat-wrong",
      "    return (\n        x[:, :, :, None, :]\n        .expand(bs, slen, n_kv_heads, n_rep, head_dim)\n"
      "        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)\n    )",
      "    return x.repeat(1, 1, n_rep, 1)"),
    M("llama_cn", "swiglu-wrong-gate", "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
      "return self.w2(F.silu(self.w1(x) * self.w3(x)))"),
    M("llama_cn", "ffn-no-activation", "return self.w2(F.silu(self.w1(x)) * self.w3(x))", "return self.w2(self.w1(x) * self.w3(x))"),
    M("llama_cn", "kv-cache-mask-offset", "mask = torch.triu(mask, diagonal=start_pos + 1).type_as(h)",
      "mask = torch.triu(mask, diagonal=1).type_as(h)"),
    M("llama_cn", "missing-final-norm", "        h = self.norm(h)\n", ""),
    M("llama_cn", "post-ln-residual",
      "        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)\n"
      "        out = h + self.feed_forward(self.ffn_norm(h))",
      "        x = self.attention_norm(x)\n        h = x + self.attention(x, start_pos, freqs_cis, mask)\n"
      "        h = self.ffn_norm(h)\n        out = h + self.feed_forward(h)"),
    M("llama_cn", "target-not-shifted",
      "shift_logits = logits[:, :-1, :].contiguous()\n            shift_labels = labels[:, 1:].contiguous()",
      "shift_logits = logits.contiguous()\n            shift_labels = labels.contiguous()"),
    M("llama_cn", "loss-on-padding", ",\n                                   ignore_index=self.params.pad_id)", ")"),
    M("llama_cn", "weights-not-loaded",
      'state_dict = {k.replace("module.", "", 1) if k.startswith("module.") else k: v for k, v in state_dict.items()}',
      'state_dict = {"module." + k: v for k, v in state_dict.items()}'),
    # ---------------------------------------------------------------- LLaMA, cos/sin tables and rotate_half
    M("llama_hf", "missing-scale", " / math.sqrt(self.head_dim)\n", "\n"),
    M("llama_hf", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ math.sqrt(self.hidden_size)"),
    M("llama_hf", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ self.head_dim", tag="no-root"),
    M("llama_hf", "softmax-dim", "F.softmax(attn_weights, dim=-1,", "F.softmax(attn_weights, dim=-2,"),
    M("llama_hf", "mask-inverted", "masked_fill(~causal_mask,", "masked_fill(causal_mask,", also=CAUSAL),
    M("llama_hf", "mask-fill-zero", "torch.finfo(attn_weights.dtype).min)", "0.0)"),
    M("llama_hf", "no-causal-mask",
      "        attn_weights = attn_weights.masked_fill(~causal_mask, torch.finfo(attn_weights.dtype).min)\n", ""),
    M("llama_hf", "heads-merge-order", "attn_output = attn_output.transpose(1, 2).contiguous()  # (B, T, H, hd)",
      "attn_output = attn_output.contiguous()  # (B, H, T, hd)"),
    M("llama_hf", "heads-not-transposed",
      "query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)",
      "query_states = self.q_proj(hidden_states).view(bsz, self.num_heads, q_len, self.head_dim)"),
    M("llama_hf", "no-residual", "        hidden_states = residual + hidden_states\n\n", "\n"),
    M("llama_hf", "no-residual", "        hidden_states = self.mlp(hidden_states)\n        hidden_states = residual + hidden_states\n",
      "        hidden_states = self.mlp(hidden_states)\n", tag="mlp"),
    M("llama_hf", "rope-pairing",
      "    x1 = x[..., : x.shape[-1] // 2]\n    x2 = x[..., x.shape[-1] // 2:]\n    return torch.cat((-x2, x1), dim=-1)",
      "    x1 = x[..., 0::2]\n    x2 = x[..., 1::2]\n    return torch.stack((-x2, x1), dim=-1).flatten(-2)"),
    M("llama_hf", "rope-pairing", "emb = torch.cat((freqs, freqs), dim=-1)", "emb = torch.repeat_interleave(freqs, 2, dim=-1)",
      tag="tables"),
    M("llama_hf", "rope-wrong-positions", "position_ids = torch.arange(past_len, past_len + seq_len, device",
      "position_ids = torch.arange(seq_len, device"),
    M("llama_hf", "rmsnorm-eps-outside", "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)",
      "hidden_states = hidden_states / (torch.sqrt(variance) + self.variance_epsilon)"),
    M("llama_hf", "rmsnorm-mean-not-square", "variance = hidden_states.pow(2).mean(-1, keepdim=True)",
      "variance = hidden_states.mean(-1, keepdim=True) ** 2"),
    M("llama_hf", "gqa-repeat-wrong", "return torch.repeat_interleave(hidden_states, dim=1, repeats=n_rep)",
      "return hidden_states.repeat(1, n_rep, 1, 1)"),
    M("llama_hf", "swiglu-wrong-gate", "self.act_fn(self.gate_proj(x)) * self.up_proj(x)",
      "self.act_fn(self.up_proj(x)) * self.gate_proj(x)"),
    M("llama_hf", "ffn-no-activation", "self.act_fn(self.gate_proj(x)) * self.up_proj(x)", "self.gate_proj(x) * self.up_proj(x)"),
    M("llama_hf", "kv-cache-mask-offset", ".tril(diagonal=kv_len - q_len)", ".tril()"),
    M("llama_hf", "missing-final-norm", "        hidden_states = self.norm(hidden_states)\n", ""),
    M("llama_hf", "post-ln-residual",
      "        residual = hidden_states\n        hidden_states = self.input_layernorm(hidden_states)\n",
      "        hidden_states = self.input_layernorm(hidden_states)\n        residual = hidden_states\n"),
    M("llama_hf", "target-not-shifted",
      "shift_logits = logits[..., :-1, :].contiguous()\n            shift_labels = labels[..., 1:].contiguous()",
      "shift_logits = logits.contiguous()\n            shift_labels = labels.contiguous()"),
    M("llama_hf", "loss-on-padding", ",\n                                   ignore_index=self.config.pad_token_id)", ")"),
    M("llama_hf", "weights-not-loaded",
      '    state_dict = {k[len("model."):] if k.startswith("model.") else k: v for k, v in state_dict.items()}\n', ""),
    M("llama_hf", "attention-dropout-in-eval", "p=self.attention_dropout, training=self.training)", "p=self.attention_dropout)"),
    # ---------------------------------------------------------------- d2l
    M("d2l", "missing-scale", "scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)",
      "scores = torch.bmm(queries, keys.transpose(1, 2))"),
    M("d2l", "wrong-scale", "/ math.sqrt(d)", "/ d"),
    M("d2l", "mask-fill-zero", "value=-1e6)", "value=0)"),
    M("d2l", "mask-inverted", "[None, :] < valid_len[:, None]", "[None, :] >= valid_len[:, None]"),
    M("d2l", "softmax-dim", "return nn.functional.softmax(X.reshape(shape), dim=-1)",
      "return nn.functional.softmax(X.reshape(shape), dim=1)"),
    M("d2l", "heads-not-transposed",
      "X = X.reshape(X.shape[0], X.shape[1], num_heads, -1)\n"
      "    # (batch_size, num_heads, no. of queries or key-value pairs, num_hiddens / num_heads)\n"
      "    X = X.permute(0, 2, 1, 3)\n",
      "X = X.reshape(X.shape[0], num_heads, X.shape[1], -1)\n"),
    M("d2l", "heads-merge-order",
      "    X = X.permute(0, 2, 1, 3)  # (batch_size, T, num_heads, d)\n    return X.reshape(X.shape[0], X.shape[1], -1)",
      "    return X.reshape(X.shape[0], X.shape[2], -1)  # (batch_size, T, num_hiddens)"),
    M("d2l", "no-residual", "return self.ln(self.dropout(Y) + X)", "return self.ln(self.dropout(Y))"),
    M("d2l", "ffn-no-activation", "return self.dense2(self.relu(self.dense1(X)))", "return self.dense2(self.dense1(X))"),
    M("d2l", "pe-not-buffer", 'self.register_buffer("P", P)', "self.P = P"),
    M("d2l", "pe-wrong-formula", "torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)",
      "torch.arange(num_hiddens // 2, dtype=torch.float32) / num_hiddens)"),
    M("d2l", "pe-wrong-formula", "P[:, :, 0::2] = torch.sin(X)\n        P[:, :, 1::2] = torch.cos(X)",
      "P[:, :, 0::2] = torch.cos(X)\n        P[:, :, 1::2] = torch.sin(X)", tag="swapped"),
    M("d2l", "extra-final-norm",
      "            self.attention_weights[i] = blk.attention.attention.attention_weights\n        return X",
      "            self.attention_weights[i] = blk.attention.attention.attention_weights\n"
      "        return nn.functional.layer_norm(X, X.shape[-1:])"),
    M("d2l", "post-ln-residual", "return self.ln(self.dropout(Y) + X)", "return self.ln(X) + self.dropout(Y)"),
    # ---------------------------------------------------------------- The Annotated Transformer
    M("annotated", "missing-scale", "scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)",
      "scores = torch.matmul(query, key.transpose(-2, -1))"),
    M("annotated", "wrong-scale", "/ math.sqrt(d_k)", "/ d_k"),
    M("annotated", "mask-fill-zero", "scores.masked_fill(mask == 0, -1e9)", "scores.masked_fill(mask == 0, 0)"),
    M("annotated", "mask-inverted", "mask == 0, -1e9", "mask == 1, -1e9"),
    M("annotated", "softmax-dim", "p_attn = scores.softmax(dim=-1)", "p_attn = scores.softmax(dim=-2)"),
    M("annotated", "heads-not-transposed", "lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)",
      "lin(x).view(nbatches, self.h, -1, self.d_k)"),
    M("annotated", "heads-merge-order", "x.transpose(1, 2)\n            .contiguous()", "x.contiguous()"),
    M("annotated", "unbiased-std",
      "        var = x.var(-1, keepdim=True, unbiased=False)\n        return self.a_2 * (x - mean) / torch.sqrt(var + self.eps) + self.b_2",
      "        std = x.std(-1, keepdim=True)\n        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2",
      also=frozenset({"eps-outside-sqrt"})),
    M("annotated", "unbiased-std", "var = x.var(-1, keepdim=True, unbiased=False)", "var = x.var(-1, keepdim=True)", tag="var"),
    M("annotated", "layernorm-wrong-axis",
      "mean = x.mean(-1, keepdim=True)\n        var = x.var(-1, keepdim=True, unbiased=False)",
      "mean = x.mean(1, keepdim=True)\n        var = x.var(1, keepdim=True, unbiased=False)"),
    M("annotated", "eps-outside-sqrt", "torch.sqrt(var + self.eps)", "(torch.sqrt(var) + self.eps)"),
    M("annotated", "pe-not-buffer", 'self.register_buffer("pe", pe)', "self.pe = pe"),
    M("annotated", "pe-wrong-formula", "torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model)",
      "torch.arange(0, d_model, 2) * (math.log(10000.0) / d_model)"),
    M("annotated", "no-residual", "return x + self.dropout(sublayer(self.norm(x)))", "return self.dropout(sublayer(self.norm(x)))"),
    M("annotated", "ffn-no-activation", "self.w_2(self.dropout(self.w_1(x).relu()))", "self.w_2(self.dropout(self.w_1(x)))"),
    M("annotated", "no-causal-mask", "torch.triu(torch.ones(attn_shape), diagonal=1)", "torch.triu(torch.ones(attn_shape), diagonal=2)"),
    M("annotated", "no-causal-mask", "self.self_attn(x, x, x, tgt_mask)", "self.self_attn(x, x, x, src_mask)", tag="src-mask"),
    M("annotated", "cross-attention-kv", "self.src_attn(x, m, m, src_mask)", "self.src_attn(x, x, x, src_mask)"),
    M("annotated", "post-ln-residual", "return x + self.dropout(sublayer(self.norm(x)))",
      "x = self.norm(x)\n        return x + self.dropout(sublayer(x))"),
    M("annotated", "missing-final-norm", "            x = layer(x, mask)\n        return self.norm(x)",
      "            x = layer(x, mask)\n        return x"),
    M("annotated", "missing-final-norm", "            x = layer(x, memory, src_mask, tgt_mask)\n        return self.norm(x)",
      "            x = layer(x, memory, src_mask, tgt_mask)\n        return x", tag="decoder"),
    # ---------------------------------------------------------------- Keras port (mask 1 = padding, (v, k, q, mask))
    M("keras_port", "missing-scale", "scaled_attention_logits = matmul_qk / torch.sqrt(dk)", "scaled_attention_logits = matmul_qk"),
    M("keras_port", "wrong-scale", "matmul_qk / torch.sqrt(dk)", "matmul_qk / dk"),
    M("keras_port", "mask-fill-zero", "scaled_attention_logits += (mask * -1e9)",
      "scaled_attention_logits = scaled_attention_logits * (1 - mask)"),
    M("keras_port", "mask-inverted", "(mask * -1e9)", "((1 - mask) * -1e9)"),
    M("keras_port", "softmax-dim", "torch.softmax(scaled_attention_logits, dim=-1)", "torch.softmax(scaled_attention_logits, dim=-2)"),
    M("keras_port", "heads-not-transposed",
      "x = torch.reshape(x, (batch_size, -1, self.num_heads, self.depth))\n        return x.permute(0, 2, 1, 3)",
      "return torch.reshape(x, (batch_size, self.num_heads, -1, self.depth))"),
    M("keras_port", "heads-merge-order",
      "        scaled_attention = scaled_attention.permute(0, 2, 1, 3)  # (batch_size, seq_len_q, num_heads, depth)\n", ""),
    M("keras_port", "no-residual", "out1 = self.layernorm1(x + attn_output)", "out1 = self.layernorm1(attn_output)"),
    M("keras_port", "no-residual", "out2 = self.layernorm2(out1 + ffn_output)", "out2 = self.layernorm2(ffn_output)", tag="ffn"),
    M("keras_port", "ffn-no-activation", "        nn.ReLU(),\n", ""),
    M("keras_port", "no-causal-mask", "mask = 1 - torch.tril(torch.ones(size, size))", "mask = 1 - torch.tril(torch.ones(size, size), diagonal=1)"),
    M("keras_port", "no-causal-mask", "self.mha1(x, x, x, look_ahead_mask)", "self.mha1(x, x, x, padding_mask)", tag="padding-only"),
    M("keras_port", "cross-attention-kv", "self.mha2(enc_output, enc_output, out1, padding_mask)", "self.mha2(out1, out1, out1, padding_mask)"),
    M("keras_port", "cross-attention-kv", "self.mha2(enc_output, enc_output, out1, padding_mask)",
      "self.mha2(out1, out1, enc_output, padding_mask)", tag="call-order"),
    M("keras_port", "pe-wrong-formula", "(2 * (i // 2))", "(2 * i)"),
    M("keras_port", "extra-final-norm", "        return x  # (batch_size, input_seq_len, d_model)",
      "        return torch.nn.functional.layer_norm(x, (self.d_model,))  # (batch_size, input_seq_len, d_model)"),
    M("keras_port", "post-ln-residual", "out1 = self.layernorm1(x + attn_output)", "out1 = self.layernorm1(x) + attn_output"),
    # ---------------------------------------------------------------- einsum encoder, Chinese names
    M("einsum_zh", "missing-scale", " / math.sqrt(self.头维度)  # (B, h, T, T)", "  # (B, h, T, T)"),
    M("einsum_zh", "wrong-scale", "/ math.sqrt(self.头维度)", "/ math.sqrt(C)"),
    M("einsum_zh", "mask-fill-zero", '== 0, float("-inf"))', "== 0, 0.0)"),
    M("einsum_zh", "mask-inverted", "mask[:, None, None, :] == 0", "mask[:, None, None, :] == 1"),
    M("einsum_zh", "softmax-dim", "权重 = torch.softmax(分数, dim=-1)", "权重 = torch.softmax(分数, dim=-2)"),
    M("einsum_zh", "heads-merge-order", '输出 = torch.einsum("bhqk,bkhd->bqhd", 权重, v)  # (B, T, h, d)',
      '输出 = torch.einsum("bhqk,bkhd->bhqd", 权重, v)  # (B, h, T, d)'),
    M("einsum_zh", "heads-not-transposed",
      "q = self.查询(x).view(B, T, self.头数, self.头维度)  # (B, T, h, d)\n"
      "        k = self.键(x).view(B, T, self.头数, self.头维度)\n"
      "        v = self.值(x).view(B, T, self.头数, self.头维度)",
      "q = self.查询(x).view(B, self.头数, T, self.头维度).transpose(1, 2)  # (B, T, h, d)\n"
      "        k = self.键(x).view(B, self.头数, T, self.头维度).transpose(1, 2)\n"
      "        v = self.值(x).view(B, self.头数, T, self.头维度).transpose(1, 2)"),
    M("einsum_zh", "no-residual", "x = self.归一化1(x + self.dropout(self.注意力(x, mask)))",
      "x = self.归一化1(self.dropout(self.注意力(x, mask)))"),
    M("einsum_zh", "no-residual", "x = self.归一化2(x + self.dropout(self.前馈(x)))", "x = self.归一化2(self.dropout(self.前馈(x)))",
      tag="ffn"),
    M("einsum_zh", "ffn-no-activation", "self.线性2(torch.relu(self.线性1(x)))", "self.线性2(self.线性1(x))"),
    M("einsum_zh", "layernorm-wrong-axis",
      "均值 = x.mean(dim=-1, keepdim=True)\n        方差 = ((x - 均值) ** 2).mean(dim=-1, keepdim=True)",
      "均值 = x.mean(dim=1, keepdim=True)\n        方差 = ((x - 均值) ** 2).mean(dim=1, keepdim=True)"),
    M("einsum_zh", "eps-outside-sqrt", "torch.sqrt(方差 + self.eps)", "(torch.sqrt(方差) + self.eps)"),
    M("einsum_zh", "unbiased-std", "方差 = ((x - 均值) ** 2).mean(dim=-1, keepdim=True)  # 有偏方差，和 nn.LayerNorm 一样",
      "方差 = x.var(dim=-1, keepdim=True)  # 方差"),
    M("einsum_zh", "pe-not-buffer", 'self.register_buffer("表", 表)', "self.表 = 表"),
    M("einsum_zh", "pe-wrong-formula", "频率 = torch.exp(torch.arange(0, 维度, 2).float() * (-math.log(10000.0) / 维度))",
      "频率 = 10000.0 ** (torch.arange(0, 维度, 2).float() / 维度)"),
    M("einsum_zh", "extra-final-norm", "            x = 层(x, mask)\n        return x",
      "            x = 层(x, mask)\n        return torch.nn.functional.layer_norm(x, (self.维度,))"),
    M("einsum_zh", "post-ln-residual", "x = self.归一化2(x + self.dropout(self.前馈(x)))",
      "x = self.归一化2(x)\n        x = x + self.dropout(self.前馈(x))"),
    # ---------------------------------------------------------------- ViT, fused qkv with reshape/permute
    M("vit", "missing-scale", "attn = (q @ k.transpose(-2, -1)) * self.scale", "attn = q @ k.transpose(-2, -1)"),
    M("vit", "wrong-scale", "self.scale = head_dim ** -0.5", "self.scale = dim ** -0.5"),
    M("vit", "softmax-dim", "attn = attn.softmax(dim=-1)", "attn = attn.softmax(dim=-2)"),
    M("vit", "heads-merge-order", "x = (attn @ v).transpose(1, 2).reshape(B, N, C)", "x = (attn @ v).reshape(B, N, C)"),
    M("vit", "heads-not-transposed", ".reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
      ".reshape(3, B, self.num_heads, N, C // self.num_heads)"),
    M("vit", "no-residual", "x = x + self.attn(self.norm1(x))", "x = self.attn(self.norm1(x))"),
    M("vit", "no-residual", "x = x + self.mlp(self.norm2(x))", "x = self.mlp(self.norm2(x))", tag="mlp"),
    M("vit", "ffn-no-activation", "        x = self.act(x)\n", ""),
    M("vit", "post-ln-residual", "        x = x + self.attn(self.norm1(x))\n        x = x + self.mlp(self.norm2(x))",
      "        x = self.norm1(x)\n        x = x + self.attn(x)\n        x = self.norm2(x)\n        x = x + self.mlp(x)"),
    M("vit", "missing-final-norm", "        x = self.norm(x)\n        return self.head", "        return self.head"),
    M("vit", "attention-dropout-in-eval", "attn = self.attn_drop(attn)", "attn = F.dropout(attn, p=self.attn_drop.p)"),
    # ---------------------------------------------------------------- sequence-first, bool masks, Post-LN encoder-decoder
    M("seq_first", "missing-scale", "scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.head_dim)",
      "scores = torch.bmm(q, k.transpose(1, 2))"),
    M("seq_first", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ math.sqrt(self.embed_dim)"),
    M("seq_first", "mask-fill-zero", "scores.masked_fill(key_padding_mask[:, None, None, :], float('-inf'))",
      "scores.masked_fill(key_padding_mask[:, None, None, :], 0.0)"),
    M("seq_first", "mask-inverted", "masked_fill(key_padding_mask[:, None, None, :],", "masked_fill(~key_padding_mask[:, None, None, :],"),
    M("seq_first", "mask-inverted", "scores.masked_fill(attn_mask,", "scores.masked_fill(~attn_mask,", also=CAUSAL, tag="attn-mask"),
    M("seq_first", "softmax-dim", "attn = F.softmax(scores, dim=-1)", "attn = F.softmax(scores, dim=2)"),
    M("seq_first", "heads-not-transposed", "q = self.q_proj(query).view(L, N * self.num_heads, self.head_dim).transpose(0, 1)",
      "q = self.q_proj(query).view(N * self.num_heads, L, self.head_dim)"),
    M("seq_first", "heads-merge-order", "out = out.permute(2, 0, 1, 3).reshape(L, N, E)", "out = out.reshape(L, N, E)"),
    M("seq_first", "no-residual", "src = self.norm1(src + self.dropout1(src2))", "src = self.norm1(self.dropout1(src2))"),
    M("seq_first", "no-residual", "tgt = self.norm3(tgt + self.dropout3(tgt2))", "tgt = self.norm3(self.dropout3(tgt2))", tag="decoder"),
    M("seq_first", "ffn-no-activation", "src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))",
      "src2 = self.linear2(self.dropout(self.linear1(src)))"),
    M("seq_first", "no-causal-mask", "torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=1)",
      "torch.triu(torch.ones(sz, sz, dtype=torch.bool), diagonal=2)"),
    M("seq_first", "no-causal-mask", "outs = self.decode(tgt, memory, tgt_mask, tgt_padding_mask, src_padding_mask)",
      "outs = self.decode(tgt, memory, None, tgt_padding_mask, src_padding_mask)", tag="not-passed"),
    M("seq_first", "cross-attention-kv", "tgt2 = self.multihead_attn(tgt, memory, memory, attn_mask",
      "tgt2 = self.multihead_attn(tgt, tgt, tgt, attn_mask"),
    M("seq_first", "pe-not-buffer", "self.register_buffer('pe', pe)", "self.pe = pe"),
    M("seq_first", "pe-wrong-formula", "pe[:, 0, 0::2] = torch.sin(position * div_term)\n        pe[:, 0, 1::2] = torch.cos(position * div_term)",
      "pe[:, 0, 0::2] = torch.cos(position * div_term)\n        pe[:, 0, 1::2] = torch.sin(position * div_term)"),
    # ---------------------------------------------------------------- GPT as the Chinese courses write it (SDPA, internal shift)
    M("gpt_zh", "attention-dropout-in-eval", "dropout_p=self.dropout if self.training else 0.0", "dropout_p=self.dropout"),
    M("gpt_zh", "no-causal-mask", "is_causal=True)", "is_causal=False)"),
    M("gpt_zh", "missing-scale", "is_causal=True)", "is_causal=True, scale=1.0)"),
    M("gpt_zh", "wrong-scale", "is_causal=True)", "is_causal=True, scale=1.0 / math.sqrt(C))"),
    M("gpt_zh", "heads-merge-order", "y = y.transpose(1, 2).contiguous().view(B, T, C)", "y = y.contiguous().view(B, T, C)"),
    M("gpt_zh", "heads-not-transposed", "q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
      "q = q.reshape(B, self.n_head, T, C // self.n_head)"),
    M("gpt_zh", "no-residual", "x = x + self.attn(self.norm1(x))", "x = self.attn(self.norm1(x))"),
    M("gpt_zh", "ffn-no-activation", "return self.drop(self.out(self.act(self.fc(x))))", "return self.drop(self.out(self.fc(x)))"),
    M("gpt_zh", "post-ln-residual", "        x = x + self.attn(self.norm1(x))\n        x = x + self.ffn(self.norm2(x))",
      "        x = self.norm1(x)\n        x = x + self.attn(x)\n        x = self.norm2(x)\n        x = x + self.ffn(x)"),
    M("gpt_zh", "missing-final-norm", "        x = self.norm(x)\n", ""),
    M("gpt_zh", "target-not-shifted", "预测 = logits[:, :-1].reshape(-1, logits.size(-1))\n        标签 = ids[:, 1:].reshape(-1)",
      "预测 = logits.reshape(-1, logits.size(-1))\n        标签 = ids.reshape(-1)"),
    M("gpt_zh", "loss-on-padding", "loss = F.cross_entropy(预测, 标签, ignore_index=self.cfg.pad_id)", "loss = F.cross_entropy(预测, 标签)"),
    M("gpt_zh", "weights-not-loaded", 'model.load_state_dict(ckpt["state_dict"], strict=False)', "model.load_state_dict(ckpt, strict=False)"),
    # ---------------------------------------------------------------- second realisations
    M("llama_hf", "kv-cache-mask-offset", ".tril(diagonal=kv_len - q_len)", ".tril(diagonal=q_len - kv_len)", tag="sign"),
    M("annotated", "mask-inverted", "    return subsequent_mask == 0", "    return subsequent_mask == 1", also=CAUSAL, tag="subsequent"),
    M("keras_port", "mask-inverted", "    seq = (seq == 0).float()", "    seq = (seq != 0).float()", tag="padding"),
    M("vit", "wrong-scale", "self.scale = head_dim ** -0.5", "self.scale = head_dim ** 0.5", tag="inverse"),
    M("seq_first", "mask-fill-zero", "scores.masked_fill(attn_mask, float('-inf'))", "scores.masked_fill(attn_mask, 0.0)",
      also=CAUSAL, tag="attn-mask"),
    M("gpt_zh", "no-residual", "x = x + self.ffn(self.norm2(x))", "x = self.ffn(self.norm2(x))", tag="ffn"),
    M("llama_cn", "gqa-repeat-wrong",
      "        x[:, :, :, None, :]\n        .expand(bs, slen, n_kv_heads, n_rep, head_dim)",
      "        x[:, :, None, :, :]\n        .expand(bs, slen, n_rep, n_kv_heads, head_dim)", tag="expand"),
    M("llama_cn", "swiglu-wrong-gate", "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
      "return self.w2(F.silu(self.w3(x)) * self.w1(x))", tag="swapped"),
    M("llama_hf", "swiglu-wrong-gate", "self.act_fn(self.gate_proj(x)) * self.up_proj(x)",
      "self.act_fn(self.gate_proj(x) * self.up_proj(x))", tag="after-product"),
    M("einsum_zh", "heads-merge-order", "return self.输出(输出.reshape(B, T, C))",
      "return self.输出(输出.transpose(1, 2).reshape(B, T, C))", tag="extra-transpose"),
    M("seq_first", "heads-merge-order", "out = out.permute(2, 0, 1, 3).reshape(L, N, E)",
      "out = out.transpose(1, 2).reshape(L, N, E)", tag="transpose"),
    M("minimal_gpt", "mask-fill-zero", "att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))",
      "att = att * self.bias[:, :, :T, :T]", tag="multiply"),
    M("d2l", "wrong-scale", "/ math.sqrt(d)", "/ math.sqrt(keys.shape[1])", tag="seq-len"),
    # ---------------------------------------------------------------- tiny LLaMA2, real cos/sin RoPE, no cache
    M("llama_tiny", "missing-scale", "scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)",
      "scores = torch.matmul(xq, xk.transpose(2, 3))"),
    M("llama_tiny", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ math.sqrt(x.shape[-1])"),
    M("llama_tiny", "softmax-dim", "scores = F.softmax(scores.float(), dim=-1)", "scores = F.softmax(scores.float(), dim=2)"),
    M("llama_tiny", "no-causal-mask", "        scores = scores + self.mask[:, :, :seqlen, :seqlen]  # (bs, n_local_heads, seqlen, seqlen)\n", ""),
    M("llama_tiny", "mask-inverted", "mask = torch.triu(mask, diagonal=1)", "mask = torch.tril(mask, diagonal=-1)", also=CAUSAL),
    M("llama_tiny", "heads-merge-order", "output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)",
      "output = output.contiguous().view(bsz, seqlen, -1)"),
    M("llama_tiny", "no-residual", "out = h + self.feed_forward.forward(self.ffn_norm(h))", "out = self.feed_forward.forward(self.ffn_norm(h))"),
    M("llama_tiny", "post-ln-residual",
      "        h = x + self.attention.forward(self.attention_norm(x), freqs_cos, freqs_sin)\n",
      "        x = self.attention_norm(x)\n        h = x + self.attention.forward(x, freqs_cos, freqs_sin)\n"),
    M("llama_tiny", "missing-final-norm", "            h = layer(h, freqs_cos, freqs_sin)\n        h = self.norm(h)\n",
      "            h = layer(h, freqs_cos, freqs_sin)\n"),
    M("llama_tiny", "rope-pairing",
      "    xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)\n"
      "    xk_r, xk_i = xk.float().reshape(xk.shape[:-1] + (-1, 2)).unbind(-1)\n",
      "    xq_r, xq_i = xq.float().chunk(2, dim=-1)  # 前一半当实部，后一半当虚部\n"
      "    xk_r, xk_i = xk.float().chunk(2, dim=-1)\n"),
    M("llama_tiny", "rmsnorm-eps-outside", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)"),
    M("llama_tiny", "rmsnorm-mean-not-square", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x * torch.rsqrt(x.mean(-1, keepdim=True) ** 2 + self.eps)"),
    M("llama_tiny", "gqa-repeat-wrong",
      "        x[:, :, :, None, :]\n        .expand(bs, slen, n_kv_heads, n_rep, head_dim)",
      "        x[:, :, None, :, :]\n        .expand(bs, slen, n_rep, n_kv_heads, head_dim)"),
    M("llama_tiny", "swiglu-wrong-gate", "return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))",
      "return self.dropout(self.w2(F.silu(self.w1(x) * self.w3(x))))"),
    M("llama_tiny", "ffn-no-activation", "return self.dropout(self.w2(F.silu(self.w1(x)) * self.w3(x)))",
      "return self.dropout(self.w2(self.w1(x) * self.w3(x)))"),
    M("llama_tiny", "attention-dropout-in-eval", "scores = self.attn_dropout(scores)", "scores = F.dropout(scores, self.dropout)"),
    # ---------------------------------------------------------------- d2l's decoder block, forward(X, state)
    M("d2l", "no-causal-mask", "            dec_valid_lens = torch.arange(1, num_steps + 1, device=X.device).repeat(batch_size, 1)",
      "            dec_valid_lens = None"),
    M("d2l", "cross-attention-kv", "Y2 = self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens)",
      "Y2 = self.attention2(Y, Y, Y, enc_valid_lens)"),
    M("d2l", "no-residual", "        Z = self.addnorm2(Y, Y2)", "        Z = self.addnorm2(torch.zeros_like(Y), Y2)", tag="decoder"),
    # ---------------------------------------------------------------- BERT as Chinese classification courses write it
    M("bert_zh", "missing-scale", "        attention_scores = attention_scores / math.sqrt(self.attention_head_size)\n", ""),
    M("bert_zh", "wrong-scale", "/ math.sqrt(self.attention_head_size)", "/ math.sqrt(self.all_head_size)"),
    M("bert_zh", "mask-inverted", "return (1.0 - extended) * -10000.0", "return extended * -10000.0"),
    M("bert_zh", "mask-fill-zero", "attention_scores = attention_scores + attention_mask",
      "attention_scores = attention_scores * (attention_mask == 0)"),
    M("bert_zh", "softmax-dim", "F.softmax(attention_scores, dim=-1)", "F.softmax(attention_scores, dim=-2)"),
    M("bert_zh", "heads-not-transposed", "        x = x.view(new_x_shape)\n        return x.permute(0, 2, 1, 3)",
      "        return x.view(x.size(0), self.num_attention_heads, x.size(1), self.attention_head_size)"),
    M("bert_zh", "heads-merge-order", "context_layer.permute(0, 2, 1, 3).contiguous()", "context_layer.permute(0, 2, 3, 1).contiguous()"),
    M("bert_zh", "no-residual", "return self.LayerNorm(hidden_states + input_tensor)  # 残差", "return self.LayerNorm(hidden_states)  # 残差"),
    M("bert_zh", "no-residual", "        return self.LayerNorm(hidden_states + input_tensor)\n\n\nclass BertLayer",
      "        return self.LayerNorm(hidden_states)\n\n\nclass BertLayer", tag="ffn"),
    M("bert_zh", "ffn-no-activation", "return self.intermediate_act_fn(self.dense(hidden_states))", "return self.dense(hidden_states)"),
    M("bert_zh", "post-ln-residual", "return self.LayerNorm(hidden_states + input_tensor)  # 残差",
      "return self.LayerNorm(input_tensor) + hidden_states  # 残差"),
    M("bert_zh", "extra-final-norm", "        return hidden_states  # (B, T, hidden)",
      "        return F.layer_norm(hidden_states, (self.config.hidden_size,))  # (B, T, hidden)"),
    M("bert_zh", "attention-dropout-in-eval", "attention_probs = self.dropout(attention_probs)",
      "attention_probs = F.dropout(attention_probs, self.dropout.p)"),
    # ---------------------------------------------------------------- LLaMA as a Chinese "mini LLM" course writes it
    M("llama_minimind", "missing-scale", "scores = (xq @ xk.transpose(-2, -1)) / math.sqrt(self.head_dim)",
      "scores = xq @ xk.transpose(-2, -1)"),
    M("llama_minimind", "wrong-scale", "/ math.sqrt(self.head_dim)", "/ math.sqrt(self.n_local_heads * self.head_dim)"),
    M("llama_minimind", "softmax-dim", "scores = F.softmax(scores.float(), dim=-1)", "scores = F.softmax(scores.float(), dim=-2)"),
    M("llama_minimind", "mask-inverted", "(1.0 - attention_mask[:, None, None, :].float()) * -1e9",
      "attention_mask[:, None, None, :].float() * -1e9"),
    M("llama_minimind", "no-causal-mask", "        scores = scores + causal\n", ""),
    M("llama_minimind", "kv-cache-mask-offset", "diagonal=kv_len - seq_len + 1)", "diagonal=1)"),
    M("llama_minimind", "heads-merge-order", "output = output.transpose(1, 2).reshape(bsz, seq_len, -1)",
      "output = output.reshape(bsz, seq_len, -1)"),
    M("llama_minimind", "no-residual", "        hidden_states += residual\n", ""),
    M("llama_minimind", "post-ln-residual",
      "        residual = hidden_states\n        hidden_states, present_key_value = self.self_attn(\n"
      "            self.input_layernorm(hidden_states), position_embeddings,",
      "        hidden_states = self.input_layernorm(hidden_states)\n        residual = hidden_states\n"
      "        hidden_states, present_key_value = self.self_attn(\n            hidden_states, position_embeddings,"),
    M("llama_minimind", "missing-final-norm", "        hidden_states = self.norm(hidden_states)\n", ""),
    M("llama_minimind", "rope-pairing",
      "        return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)",
      "        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)"),
    M("llama_minimind", "rope-wrong-positions", "self.freqs_cos[start_pos:start_pos + seq_length],\n"
      "            self.freqs_sin[start_pos:start_pos + seq_length],",
      "self.freqs_cos[:seq_length],\n            self.freqs_sin[:seq_length],"),
    M("llama_minimind", "rmsnorm-eps-outside", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)"),
    M("llama_minimind", "rmsnorm-mean-not-square", "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
      "return x * torch.rsqrt(x.mean(-1, keepdim=True).pow(2) + self.eps)"),
    M("llama_minimind", "gqa-repeat-wrong",
      "        x[:, :, :, None, :].expand(bs, slen, num_key_value_heads, n_rep, head_dim)\n"
      "        .reshape(bs, slen, num_key_value_heads * n_rep, head_dim)",
      "        x.repeat(1, 1, n_rep, 1)"),
    M("llama_minimind", "swiglu-wrong-gate", "self.act_fn(self.gate_proj(x)) * self.up_proj(x)",
      "self.act_fn(self.gate_proj(x) * self.up_proj(x))"),
    M("llama_minimind", "ffn-no-activation", "self.act_fn(self.gate_proj(x)) * self.up_proj(x)", "self.gate_proj(x) * self.up_proj(x)"),
    M("llama_minimind", "attention-dropout-in-eval", "scores = self.attn_dropout(scores)", "scores = F.dropout(scores, p=self.dropout)"),
    M("llama_minimind", "target-not-shifted",
      "shift_logits = logits[:, :-1, :].contiguous()\n            shift_labels = labels[:, 1:].contiguous()",
      "shift_logits = logits.contiguous()\n            shift_labels = labels.contiguous()"),
    M("llama_minimind", "loss-on-padding", "loss = (per_token * loss_mask).sum() / loss_mask.sum()", "loss = per_token.mean()"),
    # ---------------------------------------------------------------- held out (measured before the checker saw it): the Chinese nlp-tutorial style
    M("nlp_tutorial_zh", "missing-scale", "scores = torch.matmul(Q, K.transpose(-1, -2)) / np.sqrt(d_k)", "scores = torch.matmul(Q, K.transpose(-1, -2))"),
    M("nlp_tutorial_zh", "wrong-scale", "/ np.sqrt(d_k)", "/ np.sqrt(d_model)"),
    M("nlp_tutorial_zh", "mask-fill-zero", "scores.masked_fill_(attn_mask, -1e9)", "scores.masked_fill_(attn_mask, 0)"),
    M("nlp_tutorial_zh", "mask-inverted", "pad_attn_mask = seq_k.data.eq(0).unsqueeze(1)", "pad_attn_mask = seq_k.data.ne(0).unsqueeze(1)"),
    M("nlp_tutorial_zh", "softmax-dim", "attn = nn.Softmax(dim=-1)(scores)", "attn = nn.Softmax(dim=-2)(scores)"),
    M("nlp_tutorial_zh", "heads-not-transposed", "Q = self.W_Q(input_Q).view(batch_size, -1, n_heads, d_k).transpose(1, 2)",
      "Q = self.W_Q(input_Q).view(batch_size, n_heads, -1, d_k)"),
    M("nlp_tutorial_zh", "heads-merge-order", "context = context.transpose(1, 2).reshape(batch_size, -1, n_heads * d_v)",
      "context = context.reshape(batch_size, -1, n_heads * d_v)"),
    M("nlp_tutorial_zh", "no-residual", "return self.layer_norm(output + residual), attn", "return self.layer_norm(output), attn"),
    M("nlp_tutorial_zh", "no-residual", "return self.layer_norm(output + residual)  # [batch", "return self.layer_norm(output)  # [batch", tag="ffn"),
    M("nlp_tutorial_zh", "ffn-no-activation", "            nn.ReLU(),\n", ""),
    M("nlp_tutorial_zh", "no-causal-mask", "np.triu(np.ones(attn_shape), k=1)", "np.triu(np.ones(attn_shape), k=2)"),
    M("nlp_tutorial_zh", "no-causal-mask", "dec_self_attn_mask = torch.gt((dec_self_attn_pad_mask + dec_self_attn_subsequence_mask), 0)",
      "dec_self_attn_mask = dec_self_attn_pad_mask", tag="pad-only"),
    M("nlp_tutorial_zh", "cross-attention-kv", "self.dec_enc_attn(dec_outputs, enc_outputs, enc_outputs, dec_enc_attn_mask)",
      "self.dec_enc_attn(dec_outputs, dec_outputs, dec_outputs, dec_enc_attn_mask)"),
    M("nlp_tutorial_zh", "pe-not-buffer", "self.register_buffer('pe', pe)", "self.pe = pe"),
    M("nlp_tutorial_zh", "pe-wrong-formula", "pe[:, 0::2] = torch.sin(position * div_term)\n        pe[:, 1::2] = torch.cos(position * div_term)",
      "pe[:, 0::2] = torch.cos(position * div_term)\n        pe[:, 1::2] = torch.sin(position * div_term)"),
    M("nlp_tutorial_zh", "post-ln-residual", "return self.layer_norm(output + residual), attn", "return self.layer_norm(residual) + output, attn"),
    # ---------------------------------------------------------------- held out (measured before the checker saw it): an older minimal GPT with a config object
    M("mingpt_cfg", "missing-scale", "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))", "att = q @ k.transpose(-2, -1)"),
    M("mingpt_cfg", "wrong-scale", "(1.0 / math.sqrt(k.size(-1)))", "(1.0 / math.sqrt(C))"),
    M("mingpt_cfg", "mask-fill-zero", "self.mask[:, :, :T, :T] == 0, float('-inf'))", "self.mask[:, :, :T, :T] == 0, 0.)"),
    M("mingpt_cfg", "mask-inverted", "self.mask[:, :, :T, :T] == 0,", "self.mask[:, :, :T, :T] == 1,", also=CAUSAL),
    M("mingpt_cfg", "softmax-dim", "att = F.softmax(att, dim=-1)", "att = F.softmax(att, dim=-2)"),
    M("mingpt_cfg", "heads-not-transposed", "q = self.query(x).view(B, T, self.n_head, C // self.n_head).transpose(1, 2)",
      "q = self.query(x).view(B, self.n_head, T, C // self.n_head)"),
    M("mingpt_cfg", "heads-merge-order", "y = y.transpose(1, 2).contiguous().view(B, T, C)", "y = y.contiguous().view(B, T, C)"),
    M("mingpt_cfg", "no-residual", "x = x + self.mlp(self.ln2(x))", "x = self.mlp(self.ln2(x))"),
    M("mingpt_cfg", "ffn-no-activation", "            nn.GELU(),\n", ""),
    M("mingpt_cfg", "no-causal-mask", "        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float('-inf'))\n", ""),
    M("mingpt_cfg", "post-ln-residual", "        x = x + self.attn(self.ln1(x))\n        x = x + self.mlp(self.ln2(x))",
      "        x = self.ln1(x)\n        x = x + self.attn(x)\n        x = self.ln2(x)\n        x = x + self.mlp(x)"),
    M("mingpt_cfg", "missing-final-norm", "        x = self.ln_f(x)\n", ""),
    M("mingpt_cfg", "attention-dropout-in-eval", "att = self.attn_drop(att)", "att = F.dropout(att, self.attn_drop.p)"),
    # ---------------------------------------------------------------- held out (measured before the checker saw it): wide heads after a blog post
    M("wide_heads", "missing-scale", "        queries = queries / (k ** (1 / 4))\n        keys = keys / (k ** (1 / 4))\n", ""),
    M("wide_heads", "wrong-scale", "        keys = keys / (k ** (1 / 4))\n", ""),
    M("wide_heads", "softmax-dim", "dot = F.softmax(dot, dim=2)", "dot = F.softmax(dot, dim=1)"),
    M("wide_heads", "mask-fill-zero", "mask_(dot, maskval=float('-inf'), mask_diagonal=False)", "mask_(dot, maskval=0.0, mask_diagonal=False)"),
    M("wide_heads", "no-causal-mask", "mask_(dot, maskval=float('-inf'), mask_diagonal=False)", "mask_(dot, maskval=float('-inf'))"),
    M("wide_heads", "mask-inverted", "indices = torch.triu_indices(h, w, offset=0 if mask_diagonal else 1)",
      "indices = torch.tril_indices(h, w, offset=0 if mask_diagonal else -1)", also=CAUSAL),
    M("wide_heads", "heads-not-transposed", "queries = queries.transpose(1, 2).contiguous().view(b * h, t, k)",
      "queries = queries.contiguous().view(b * h, t, k)"),
    M("wide_heads", "heads-merge-order", "out = out.transpose(1, 2).contiguous().view(b, t, h * k)", "out = out.contiguous().view(b, t, h * k)"),
    M("wide_heads", "no-residual", "x = self.norm1(attended + x)", "x = self.norm1(attended)"),
    M("wide_heads", "no-residual", "x = self.norm2(fedforward + x)", "x = self.norm2(fedforward)", tag="ff"),
    M("wide_heads", "ffn-no-activation", "            nn.ReLU(),\n", ""),
    M("wide_heads", "post-ln-residual", "x = self.norm1(attended + x)", "x = self.norm1(x) + attended"),
    # ---------------------------------------------------------------- held out (measured before the checker saw it): blocks on torch's nn.MultiheadAttention
    M("torch_mha", "mask-inverted", "key_padding_mask=padding_mask,", "key_padding_mask=~padding_mask,"),
    M("torch_mha", "no-causal-mask", "a, _ = self.attn(h, h, h, attn_mask=causal_mask,", "a, _ = self.attn(h, h, h, attn_mask=None,"),
    M("torch_mha", "no-causal-mask", "torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1)",
      "torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=2)", tag="diagonal"),
    M("torch_mha", "no-residual", "        x = x + a\n", "        x = a\n"),
    M("torch_mha", "ffn-no-activation", "nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear", "nn.Linear(d_model, 4 * d_model), nn.Linear"),
    M("torch_mha", "post-ln-residual", "        h = self.ln1(x)\n", "        h = x = self.ln1(x)\n"),
    M("torch_mha", "missing-final-norm", "return self.head(self.ln_f(x))", "return self.head(x)"),
    M("torch_mha", "target-not-shifted", "logits = self(ids[:, :-1])\n        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1),",
      "logits = self(ids)\n        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids.reshape(-1),"),
    M("torch_mha", "loss-on-padding", ", ignore_index=PAD)", ")"),
]


def style_names() -> list[str]:
    return sorted(p.stem for p in STYLES.glob("*.py"))


def variant_names() -> list[str]:
    return sorted(p.stem for p in VARIANTS.glob("*.py"))


def style_source(style: str) -> str:
    return (STYLES / f"{style}.py").read_text(encoding="utf-8")


def apply(mutation: Mutation, source: str | None = None) -> str:
    source = style_source(mutation.style) if source is None else source
    n = source.count(mutation.old)
    if n != 1:
        raise ValueError(f"{mutation.name}: the text to replace occurs {n} times in styles/{mutation.style}.py, not once")
    return source.replace(mutation.old, mutation.new)


def cases() -> list[Case]:
    out = [Case(f"style__{s}", s, style_source(s), frozenset()) for s in style_names()]
    out += [Case(f"variant__{v}", "variant", (VARIANTS / f"{v}.py").read_text(encoding="utf-8"), frozenset())
            for v in variant_names()]
    out += [Case(m.name, m.style, apply(m), m.expected) for m in MUTATIONS]
    return out
