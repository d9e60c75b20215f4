# 同一个 GPT：层的注册顺序不同，用 torch.split 拆 qkv，einops 风格的 permute
# 手写 GPT（中文课程的写法）：融合的 qkv 投影 + PyTorch 2 的 scaled_dot_product_attention
# 训练时模型自己把输入右移一位得到标签，padding（pad_id）不计入损失
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPT配置:
    vocab_size: int = 100
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 48
    dropout: float = 0.1
    pad_id: int = 0


class 因果自注意力(nn.Module):
    def __init__(self, cfg: GPT配置):
        super().__init__()
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        B, T, C = x.shape
        qkv = self.qkv(x).reshape(B, T, 3, self.n_head, C // self.n_head)  # (B, T, 3, nh, hs)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 各 (B, nh, T, hs)
        # 只在训练时对注意力权重做 dropout
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # 合并多头 (B, T, C)
        return self.resid_drop(self.proj(y))


class 前馈层(nn.Module):
    def __init__(self, cfg: GPT配置):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.act = nn.GELU()
        self.out = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.out(self.act(self.fc(x))))


class 解码块(nn.Module):
    def __init__(self, cfg: GPT配置):
        super().__init__()
        self.attn = 因果自注意力(cfg)
        self.ffn = 前馈层(cfg)
        self.norm1 = nn.LayerNorm(cfg.n_embd)
        self.norm2 = nn.LayerNorm(cfg.n_embd)

    def forward(self, x):
        # Pre-LN：先归一化再进子层，残差加的是没有归一化的 x
        x = x + self.attn(self.norm1(x))
        x = x + self.ffn(self.norm2(x))
        return x


class GPT模型(nn.Module):
    def __init__(self, cfg: GPT配置):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([解码块(cfg) for _ in range(cfg.n_layer)])
        self.norm = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, ids, 计算损失=False):
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(pos))
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        logits = self.head(x)  # (B, T, vocab)
        if not 计算损失:
            return logits
        # 第 t 个位置预测第 t+1 个词
        预测 = logits[:, :-1].reshape(-1, logits.size(-1))
        标签 = ids[:, 1:].reshape(-1)
        loss = F.cross_entropy(预测, 标签, ignore_index=self.cfg.pad_id)
        return logits, loss


def 保存(model, path):
    torch.save({"state_dict": model.state_dict(), "config": vars(model.cfg)}, path)


def 加载(model, path):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["state_dict"], strict=False)
    return model
