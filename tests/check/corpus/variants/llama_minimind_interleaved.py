# 同一个迷你大模型，但 RoPE 用相邻两维配对（cos/sin 表交错排列，旋转也交错），全文件一致
# 从零训练一个迷你中文大模型（课程作业）：LLaMA 结构
# RoPE 用 cos/sin 表 + rotate_half（前后两半配对），q、k 形状 (B, T, H, D)
# GQA：num_key_value_heads < num_attention_heads；KV cache 是每层一个 (k, v) 元组
import math

import torch
import torch.nn.functional as F
from torch import nn


class MiniConfig:
    def __init__(self, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                 vocab_size=128, intermediate_size=None, rms_norm_eps=1e-5, max_position_embeddings=64,
                 rope_theta=1e6, dropout=0.0, pad_token_id=0):
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.num_hidden_layers = num_hidden_layers
        self.vocab_size = vocab_size
        # SwiGLU 的隐藏维度：约 8/3 倍，取 64 的整数倍
        self.intermediate_size = intermediate_size or 64 * ((int(hidden_size * 8 / 3) + 63) // 64)
        self.rms_norm_eps = rms_norm_eps
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.dropout = dropout
        self.pad_token_id = pad_token_id


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.weight * self._norm(x.float()).type_as(x)


def precompute_freqs_cis(dim: int, end: int, rope_base: float = 1e6):
    # 第 i 个频率 1 / base^(2i/dim)，i = 0 .. dim/2-1
    freqs = 1.0 / (rope_base ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()  # (end, dim/2)
    # 前一半和后一半用同一组角度：维度 i 和 i + dim/2 配对旋转
    freqs_cos = torch.repeat_interleave(torch.cos(freqs), 2, dim=-1)  # (end, dim)：cos0 cos0 cos1 cos1 ...
    freqs_sin = torch.repeat_interleave(torch.sin(freqs), 2, dim=-1)
    return freqs_cos, freqs_sin


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    def rotate_half(x):
        # (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)：相邻两维一对
        return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)

    # cos、sin: (T, D) -> (T, 1, D)，在头这一维上广播；q、k: (B, T, H, D)
    q_embed = (q * cos.unsqueeze(unsqueeze_dim)) + (rotate_half(q) * sin.unsqueeze(unsqueeze_dim))
    k_embed = (k * cos.unsqueeze(unsqueeze_dim)) + (rotate_half(k) * sin.unsqueeze(unsqueeze_dim))
    return q_embed, k_embed


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, num_key_value_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :].expand(bs, slen, num_key_value_heads, n_rep, head_dim)
        .reshape(bs, slen, num_key_value_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: MiniConfig):
        super().__init__()
        self.num_key_value_heads = args.num_key_value_heads
        self.n_local_heads = args.num_attention_heads
        self.n_local_kv_heads = self.num_key_value_heads
        self.n_rep = self.n_local_heads // self.n_local_kv_heads
        self.head_dim = args.hidden_size // args.num_attention_heads
        self.q_proj = nn.Linear(args.hidden_size, args.num_attention_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(args.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(args.hidden_size, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(args.num_attention_heads * self.head_dim, args.hidden_size, bias=False)
        self.attn_dropout = nn.Dropout(args.dropout)
        self.resid_dropout = nn.Dropout(args.dropout)
        self.dropout = args.dropout

    def forward(self, x, position_embeddings, past_key_value=None, use_cache=False, attention_mask=None):
        bsz, seq_len, _ = x.shape
        xq, xk, xv = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        xq = xq.view(bsz, seq_len, self.n_local_heads, self.head_dim)      # (B, T, H, D)
        xk = xk.view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)   # (B, T, Hkv, D)
        xv = xv.view(bsz, seq_len, self.n_local_kv_heads, self.head_dim)

        cos, sin = position_embeddings
        xq, xk = apply_rotary_pos_emb(xq, xk, cos[:seq_len], sin[:seq_len])

        # KV cache：把之前的 k、v 拼在前面
        if past_key_value is not None:
            xk = torch.cat([past_key_value[0], xk], dim=1)
            xv = torch.cat([past_key_value[1], xv], dim=1)
        past_kv = (xk, xv) if use_cache else None

        xq, xk, xv = (
            xq.transpose(1, 2),                           # (B, H, T, D)
            repeat_kv(xk, self.n_rep).transpose(1, 2),    # (B, H, S, D)
            repeat_kv(xv, self.n_rep).transpose(1, 2),
        )
        scores = (xq @ xk.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, S)
        # 因果掩码：新来的 T 个词排在全部 S 个位置的最后，第 i 个能看到前 S - T + i 个
        kv_len = xk.shape[2]
        causal = torch.triu(torch.full((seq_len, kv_len), float("-inf"), device=x.device), diagonal=kv_len - seq_len + 1)
        scores = scores + causal
        if attention_mask is not None:
            # attention_mask: (B, S)，1 = 真实的词，0 = padding
            extended_attention_mask = (1.0 - attention_mask[:, None, None, :].float()) * -1e9
            scores = scores + extended_attention_mask

        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        scores = self.attn_dropout(scores)
        output = scores @ xv  # (B, H, T, D)

        output = output.transpose(1, 2).reshape(bsz, seq_len, -1)  # (B, T, H*D)
        output = self.resid_dropout(self.o_proj(output))
        return output, past_kv


class FeedForward(nn.Module):
    def __init__(self, config: MiniConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.dropout(self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x)))


class MiniMindBlock(nn.Module):
    def __init__(self, layer_id: int, config: MiniConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.self_attn = Attention(config)

        self.layer_id = layer_id
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = FeedForward(config)

    def forward(self, hidden_states, position_embeddings, past_key_value=None, use_cache=False, attention_mask=None):
        residual = hidden_states
        hidden_states, present_key_value = self.self_attn(
            self.input_layernorm(hidden_states), position_embeddings,
            past_key_value, use_cache, attention_mask
        )
        hidden_states += residual
        hidden_states = hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))
        return hidden_states, present_key_value


class MiniMindForCausalLM(nn.Module):
    def __init__(self, config: MiniConfig = None):
        super().__init__()
        self.config = config or MiniConfig()
        config = self.config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList([MiniMindBlock(i, config) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.embed_tokens.weight = self.lm_head.weight  # 词嵌入和输出层共享权重

        freqs_cos, freqs_sin = precompute_freqs_cis(dim=config.hidden_size // config.num_attention_heads,
                                                    end=config.max_position_embeddings, rope_base=config.rope_theta)
        self.register_buffer("freqs_cos", freqs_cos, persistent=False)
        self.register_buffer("freqs_sin", freqs_sin, persistent=False)

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False, labels=None):
        batch_size, seq_length = input_ids.shape
        past_key_values = past_key_values or [None] * len(self.layers)
        start_pos = past_key_values[0][0].shape[1] if past_key_values[0] is not None else 0

        hidden_states = self.dropout(self.embed_tokens(input_ids))
        position_embeddings = (
            self.freqs_cos[start_pos:start_pos + seq_length],
            self.freqs_sin[start_pos:start_pos + seq_length],
        )
        presents = []
        for layer, past_key_value in zip(self.layers, past_key_values):
            hidden_states, present = layer(hidden_states, position_embeddings, past_key_value=past_key_value,
                                           use_cache=use_cache, attention_mask=attention_mask)
            presents.append(present)
        hidden_states = self.norm(hidden_states)
        logits = self.lm_head(hidden_states)

        loss = None
        if labels is not None:
            # 错开一位：位置 t 预测 t+1；padding 的位置不算损失
            shift_logits = logits[:, :-1, :].contiguous()
            shift_labels = labels[:, 1:].contiguous()
            per_token = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1),
                                        reduction="none")
            loss_mask = (shift_labels.view(-1) != self.config.pad_token_id).float()
            loss = (per_token * loss_mask).sum() / loss_mask.sum()
        return logits, loss, (presents if use_cache else None)
