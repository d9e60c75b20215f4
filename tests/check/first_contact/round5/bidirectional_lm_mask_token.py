# tiny masked-LM (BERT-ish) written from scratch, no HF
# post-LN encoder, learned positions + token type 0 only
import math
import random
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 60
    hidden: int = 48
    n_heads: int = 3
    n_layers: int = 2
    ff: int = 96
    max_len: int = 16
    dropout: float = 0.1
    pad_id: int = 0
    cls_id: int = 1
    sep_id: int = 2
    mask_id: int = 3


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.n_heads
        self.dh = cfg.hidden // cfg.n_heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_mask):
        # attn_mask: (B, T) with 1 = real token, 0 = pad
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.h, self.dh).permute(0, 2, 1, 3)
        k = k.view(B, T, self.h, self.dh).permute(0, 2, 1, 3)
        v = v.view(B, T, self.h, self.dh).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh)
        ext = (1.0 - attn_mask[:, None, None, :].float()) * -10000.0  # additive mask
        scores = scores + ext
        probs = self.drop(scores.softmax(dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(B, T, C)
        return self.proj(ctx)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.fc_in = nn.Linear(cfg.hidden, cfg.ff)
        self.fc_out = nn.Linear(cfg.ff, cfg.hidden)
        self.ln2 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, attn_mask):
        x = self.ln1(x + self.drop(self.attn(x, attn_mask)))
        h = self.fc_out(F.gelu(self.fc_in(x)))
        x = self.ln2(x + self.drop(h))
        return x


class MaskedLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_len, cfg.hidden)
        self.emb_ln = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        # prediction head: dense + gelu + LN + decoder
        self.head_dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.head_ln = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.decoder = nn.Linear(cfg.hidden, cfg.vocab_size)

    def forward(self, ids, attn_mask):
        T = ids.size(1)
        pos = torch.arange(T, device=ids.device)[None]
        x = self.drop(self.emb_ln(self.tok(ids) + self.pos(pos)))
        for blk in self.blocks:
            x = blk(x, attn_mask)
        h = self.head_ln(F.gelu(self.head_dense(x)))
        return self.decoder(h)  # (B, T, vocab)


# ---------------- data ----------------
def random_batch(cfg, batch_size=4, rng=random):
    seqs = []
    for _ in range(batch_size):
        n = rng.randint(4, cfg.max_len - 2)
        body = [rng.randint(4, cfg.vocab_size - 1) for _ in range(n)]
        seqs.append([cfg.cls_id] + body + [cfg.sep_id])
    T = max(len(s) for s in seqs)
    ids = torch.full((batch_size, T), cfg.pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    attn_mask = (ids != cfg.pad_id).long()
    return ids, attn_mask


def mask_tokens(ids, cfg, p=0.15):
    """BERT recipe: choose 15%, of those 80% -> [MASK], 10% random, 10% unchanged."""
    labels = ids.clone()
    special = (ids == cfg.pad_id) | (ids == cfg.cls_id) | (ids == cfg.sep_id)
    prob = torch.full(ids.shape, p)
    prob.masked_fill_(special, 0.0)
    chosen = torch.bernoulli(prob).bool()
    labels[~chosen] = -100  # only predict the chosen ones
    inputs = ids.clone()
    to_mask = torch.bernoulli(torch.full(ids.shape, 0.8)).bool() & chosen
    inputs[to_mask] = cfg.mask_id
    to_rand = torch.bernoulli(torch.full(ids.shape, 0.5)).bool() & chosen & ~to_mask
    inputs[to_rand] = torch.randint(4, cfg.vocab_size, ids.shape)[to_rand]
    return inputs, labels


def mlm_loss(logits, labels):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100)


if __name__ == "__main__":
    random.seed(0)
    torch.manual_seed(0)
    cfg = Config()
    model = MaskedLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(10):
        ids, attn_mask = random_batch(cfg)
        inputs, labels = mask_tokens(ids, cfg)
        logits = model(inputs, attn_mask)
        loss = mlm_loss(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} mlm loss {loss.item():.3f}")
