"""第 9 步 · 完整的 Transformer，在复制任务上训练 | Step 9 · The whole Transformer on the copy task

中文：把前 8 步的零件装成论文里的编码器-解码器：

    encode(src)  = N 个 EncoderLayer( dropout( PE( src_embed(src) · √d_model ) ) )
    decode(tgt)  = generator( N 个 DecoderLayer( dropout( PE( tgt_embed(tgt) · √d_model ) ), memory ) )

`generator` 是 `nn.Linear(d_model, tgt_vocab)`，输出每个位置下一个词的 logits（不做 softmax，
损失函数 `cross_entropy` 自己会做）。词向量乘 √d_model，让它和位置编码的量级相当。
复制任务（The Annotated Transformer 的第一个检查）：源句子是随机符号 `a b c d`，目标是
`<bos> a b c d <eos>`；一个正确的实现几百步就能学会，任何一个经典错误都会让它学不会或“作弊”。

English: assemble the parts of steps 1-8 into the paper's encoder-decoder (formulas above).
`generator` is `nn.Linear(d_model, tgt_vocab)`: the logits of the next token at each position (no
softmax; `cross_entropy` does it). The embeddings are multiplied by √d_model so that they are of the
size of the positional encoding. The copy task (The Annotated Transformer's first check): the
source is random symbols `a b c d`, the target `<bos> a b c d <eos>`; a correct model learns it in a
few hundred steps, and each classic bug makes it fail to learn or "cheat".

Interface (what the grader calls): `Transformer(src_vocab, tgt_vocab, d_model, n_heads, d_ff,
n_layers, dropout, max_len)`; `encode(src, src_mask) -> memory (B, S, d_model)`;
`decode(memory, src_mask, tgt, tgt_mask) -> logits (B, T, tgt_vocab)`;
`forward(src, tgt, src_mask, tgt_mask) -> logits`. Masks as in step 2: `src_mask = padding_mask(src)`
`(B, 1, 1, S)`, `tgt_mask = target_mask(tgt)` `(B, 1, T, T)`.

评分 · Graded by: `python exercises/_grade.py exercises/09_transformer.py`: the logits' shape; no
position reads a later target token (changing `tgt[:, t:]` leaves the logits before t unchanged);
source padding is ignored (more padding, same logits); then the grader builds it with one layer of
each, d_model 32, 4 heads, d_ff 64, dropout 0, trains it with its own loop on the copy task
(vocabulary of 3 specials + 8 symbols, lengths 3-6, batch 32, 300 steps of Adam with the Noam
schedule, seed 0) and greedy-decodes 64 new sources: at least 48 must come back exactly (the
solution copies 62).
`scratchformer check exercises/09_transformer.py` checks the blocks.
参考答案 · Solution: `exercises/solutions/09_transformer.py`.
"""
import math

import torch
from torch import nn


# ---- 已给出（第 1 到 8 步的答案）· Given: the solutions of steps 1 to 8 (paste your own if you like)
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    probs = weights if dropout is None else dropout(weights)
    return probs @ value, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.d_k, self.n_heads = d_model // n_heads, n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        q, k, v = (w(t).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, T, d_k)
                   for w, t in ((self.W_q, query), (self.W_k, key), (self.W_v, value)))
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        out = out.transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_k)  # (B, Tq, d_model)
        return self.W_o(out), weights


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


def padding_mask(seq, pad_idx=0):
    return (seq != pad_idx).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, S)


def subsequent_mask(size):
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))  # (1, T, T)


def target_mask(tgt, pad_idx=0):
    return padding_mask(tgt, pad_idx) & subsequent_mask(tgt.size(1)).to(tgt.device)  # (B, 1, T, T)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)  # (max_len, d_model / 2)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, d_model): moves with .to(), saved in state_dict

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]  # (B, T, d_model)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.ffn(x)))  # (B, T, d_model)


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)[0]))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)[0]))
        return self.norm3(x + self.dropout(self.ffn(x)))  # (B, T, d_model)
# ---- 已给出的部分到此为止 · end of the given part


class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.1,
                 max_len=128):
        super().__init__()
        self.d_model = d_model
        raise NotImplementedError('TODO 09a: 两个 nn.Embedding、一个 PositionalEncoding、n_layers 个 EncoderLayer 和 DecoderLayer（nn.ModuleList）、generator = nn.Linear(d_model, tgt_vocab)、dropout · build src_embed, tgt_embed, pos, encoder_layers, decoder_layers (nn.ModuleList), generator and dropout')
        for p in self.parameters():  # 已给出 · given: Glorot init, as The Annotated Transformer (trains faster)
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask):
        raise NotImplementedError('TODO 09b: x = dropout(pos(src_embed(src) * √d_model))，再逐层 x = layer(x, src_mask) · embed, scale by sqrt(d_model), add positions, dropout, then every encoder layer')

    def decode(self, memory, src_mask, tgt, tgt_mask):
        raise NotImplementedError('TODO 09c: 和 encode 一样嵌入 tgt，逐层 x = layer(x, memory, src_mask, tgt_mask)，最后 generator(x) · embed tgt like encode, run every decoder layer on (x, memory, src_mask, tgt_mask), return generator(x)')

    def forward(self, src, tgt, src_mask, tgt_mask):
        raise NotImplementedError('TODO 09d: return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)')
