# LLaMA 课程版本：不用 GQA（n_kv_heads = n_heads）
# 从零实现一个 LLaMA 风格的解码器（课程作业）
# RMSNorm + 旋转位置编码（复数形式）+ 分组查询注意力（GQA）+ SwiGLU + KV cache
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: Optional[int] = None  # None：和 n_heads 一样，普通多头注意力
    vocab_size: int = 128
    multiple_of: int = 32           # 前馈层隐藏维度取它的整数倍
    norm_eps: float = 1e-5
    max_batch_size: int = 4
    max_seq_len: int = 32
    pad_id: int = 0


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def _norm(self, x):
        # 均方根归一化：x / sqrt(mean(x^2) + eps)，不减均值
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0):
    # 每一对相邻维度 (2i, 2i+1) 旋转的角频率
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()  # (end, dim/2)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)  # 复数 e^{i m θ}
    return freqs_cis


def reshape_for_broadcast(freqs_cis: torch.Tensor, x: torch.Tensor):
    ndim = x.ndim
    assert freqs_cis.shape == (x.shape[1], x.shape[-1])
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return freqs_cis.view(*shape)  # (1, T, 1, hd/2)


def apply_rotary_emb(xq, xk, freqs_cis):
    # 相邻两维组成一个复数：(..., hd) -> (..., hd/2, 2) -> 复数 (..., hd/2)
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = reshape_for_broadcast(freqs_cis, xq_)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """等价于 torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_kv_heads = args.n_heads if args.n_kv_heads is None else args.n_kv_heads
        self.n_heads = args.n_heads
        self.n_rep = self.n_heads // self.n_kv_heads  # 每个 kv 头被几个 q 头共享
        self.head_dim = args.dim // args.n_heads

        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

        # KV 缓存：推理时保存之前所有位置的 k、v
        self.register_buffer("cache_k", torch.zeros(
            args.max_batch_size, args.max_seq_len, self.n_kv_heads, self.head_dim), persistent=False)
        self.register_buffer("cache_v", torch.zeros(
            args.max_batch_size, args.max_seq_len, self.n_kv_heads, self.head_dim), persistent=False)

    def forward(self, x: torch.Tensor, start_pos: int, freqs_cis: torch.Tensor, mask: Optional[torch.Tensor]):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)

        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)      # (B, T, H, hd)
        xk = xk.view(bsz, seqlen, self.n_kv_heads, self.head_dim)   # (B, T, Hkv, hd)
        xv = xv.view(bsz, seqlen, self.n_kv_heads, self.head_dim)

        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)

        if self.training:
            keys, values = xk, xv  # 训练时整段一起算，不用缓存
        else:
            # 推理：前 start_pos 个位置的 k、v 取自缓存，再写入这次的新 k、v
            keys = torch.cat([self.cache_k[:bsz, :start_pos].to(xk), xk], dim=1)    # (B, S, Hkv, hd)
            values = torch.cat([self.cache_v[:bsz, :start_pos].to(xv), xv], dim=1)  # (B, S, Hkv, hd)
            self.cache_k[:bsz, start_pos: start_pos + seqlen] = xk.detach()
            self.cache_v[:bsz, start_pos: start_pos + seqlen] = xv.detach()

        # GQA：把 kv 头复制 n_rep 份，与 q 头一一对应
        keys = repeat_kv(keys, self.n_rep)      # (B, S, H, hd)
        values = repeat_kv(values, self.n_rep)  # (B, S, H, hd)

        xq = xq.transpose(1, 2)          # (B, H, T, hd)
        keys = keys.transpose(1, 2)      # (B, H, S, hd)
        values = values.transpose(1, 2)  # (B, H, S, hd)
        scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask  # (B, H, T, S)，被屏蔽的位置是 -inf
        scores = F.softmax(scores.float(), dim=-1).type_as(xq)
        output = torch.matmul(scores, values)  # (B, H, T, hd)
        output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)  # (B, T, H*hd)
        return self.wo(output)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, multiple_of: int):
        super().__init__()
        hidden_dim = int(2 * hidden_dim / 3)
        hidden_dim = multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        # SwiGLU：w1 分支过 SiLU 作为门控，乘以 w3 分支
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.dim = args.dim
        self.head_dim = args.dim // args.n_heads
        self.attention = Attention(args)
        self.feed_forward = FeedForward(dim=args.dim, hidden_dim=4 * args.dim, multiple_of=args.multiple_of)
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, start_pos, freqs_cis, mask):
        # Pre-Norm：先归一化，再进子层，最后加残差
        h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
        out = h + self.feed_forward(self.ffn_norm(h))
        return out


class Transformer(nn.Module):
    def __init__(self, params: ModelArgs):
        super().__init__()
        self.params = params
        self.vocab_size = params.vocab_size
        self.n_layers = params.n_layers
        self.tok_embeddings = nn.Embedding(params.vocab_size, params.dim)
        self.layers = torch.nn.ModuleList()
        for layer_id in range(params.n_layers):
            self.layers.append(TransformerBlock(layer_id, params))
        self.norm = RMSNorm(params.dim, eps=params.norm_eps)
        self.output = nn.Linear(params.dim, params.vocab_size, bias=False)
        # 旋转位置编码表预先算好，长度取 2 倍 max_seq_len 留余量
        self.register_buffer("freqs_cis", precompute_freqs_cis(
            params.dim // params.n_heads, params.max_seq_len * 2), persistent=False)

    def forward(self, tokens: torch.Tensor, start_pos: int = 0, labels: Optional[torch.Tensor] = None):
        _bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cis = self.freqs_cis[start_pos: start_pos + seqlen]

        mask = None
        if seqlen > 1:
            # 因果掩码：第 i 个新 token 能看到缓存里的 start_pos 个位置和它自己之前的新 token
            mask = torch.full((seqlen, start_pos + seqlen), float("-inf"), device=tokens.device)
            mask = torch.triu(mask, diagonal=start_pos + 1).type_as(h)

        for layer in self.layers:
            h = layer(h, start_pos, freqs_cis, mask)
        h = self.norm(h)
        logits = self.output(h).float()

        loss = None
        if labels is not None:
            # 语言模型：用位置 t 的输出预测第 t+1 个 token；padding 不计入损失
            shift_logits = logits[:, :-1, :].contiguous()
            shift_labels = labels[:, 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, self.vocab_size), shift_labels.view(-1),
                                   ignore_index=self.params.pad_id)
        return logits, loss


def save_model(model, path):
    torch.save(model.state_dict(), path)


def load_model(model, path):
    state_dict = torch.load(path, map_location="cpu", weights_only=True)
    # 多卡训练保存的权重带 "module." 前缀，去掉再加载
    state_dict = {k.replace("module.", "", 1) if k.startswith("module.") else k: v for k, v in state_dict.items()}
    model.load_state_dict(state_dict, strict=False)
    return model
