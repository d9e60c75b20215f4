"""Seq2seq Transformer without RNNs, tensors kept (seq_len, batch, features)
like torch.nn.Transformer's default batch_first=False.

Masks follow the torch convention:
  key_padding_mask: (batch, seq) bool, True = padding (ignored)
  attn_mask:        (tgt_len, tgt_len) float, -inf above the diagonal, added to scores
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        # x: (T, B, C) -> normalise every position over its C features
        mu = x.mean(dim=-1, keepdim=True)
        var = (x - mu).pow(2).mean(dim=-1, keepdim=True)
        return (x - mu) / (torch.sqrt(var) + self.eps) * self.weight + self.bias


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        # x: (T, B, C)
        return self.dropout(x + self.pe[: x.size(0)])


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, key_padding_mask=None, attn_mask=None):
        tgt_len, bsz, _ = query.shape
        src_len = key.shape[0]
        H, hd = self.num_heads, self.head_dim

        # (T, B, C) -> (T, B*H, hd) -> (B*H, T, hd)
        q = self.q_proj(query).contiguous().view(tgt_len, bsz * H, hd).transpose(0, 1)
        k = self.k_proj(key).contiguous().view(src_len, bsz * H, hd).transpose(0, 1)
        v = self.v_proj(value).contiguous().view(src_len, bsz * H, hd).transpose(0, 1)

        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(hd)  # (B*H, tgt, src)
        if attn_mask is not None:
            scores = scores + attn_mask
        if key_padding_mask is not None:
            scores = scores.view(bsz, H, tgt_len, src_len)
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
            scores = scores.view(bsz * H, tgt_len, src_len)
        weights = self.dropout(F.softmax(scores, dim=-1))
        out = torch.bmm(weights, v)  # (B*H, tgt, hd)
        out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, self.embed_dim)
        return self.out_proj(out)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_key_padding_mask):
        x = src
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=src_key_padding_mask)))
        x = self.norm2(x + self.dropout(self.linear2(F.relu(self.linear1(x)))))
        return x


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask, tgt_key_padding_mask, memory_key_padding_mask):
        x = tgt
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, key_padding_mask=tgt_key_padding_mask,
                                                       attn_mask=tgt_mask)))
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory,
                                                        key_padding_mask=memory_key_padding_mask)))
        x = self.norm3(x + self.dropout(self.linear2(F.relu(self.linear1(x)))))
        return x


class Seq2SeqTransformer(nn.Module):
    def __init__(self, *, src_vocab_size, tgt_vocab_size, d_model, nhead, num_encoder_layers,
                 num_decoder_layers, dim_feedforward, dropout, max_len, pad_idx):
        super().__init__()
        self.d_model = d_model
        self.pad_idx = pad_idx
        self.src_tok_emb = nn.Embedding(src_vocab_size, d_model)
        self.tgt_tok_emb = nn.Embedding(tgt_vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, dropout, max_len)
        self.encoder_layers = nn.ModuleList(
            [EncoderLayer(d_model, nhead, dim_feedforward, dropout) for _ in range(num_encoder_layers)])
        self.decoder_layers = nn.ModuleList(
            [DecoderLayer(d_model, nhead, dim_feedforward, dropout) for _ in range(num_decoder_layers)])
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def encode(self, src, src_padding_mask):
        x = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.d_model))
        for layer in self.encoder_layers:
            x = layer(x, src_padding_mask)
        return x

    def decode(self, tgt, memory, tgt_mask, tgt_padding_mask, memory_key_padding_mask):
        x = self.positional_encoding(self.tgt_tok_emb(tgt) * math.sqrt(self.d_model))
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, tgt_padding_mask, memory_key_padding_mask)
        return x

    def forward(self, src, tgt, tgt_mask, src_padding_mask, tgt_padding_mask):
        # src: (S, B) tgt: (T, B)
        memory = self.encode(src, src_padding_mask)
        out = self.decode(tgt, memory, tgt_mask, tgt_padding_mask, src_padding_mask)
        return self.generator(out)  # (T, B, V)


def generate_square_subsequent_mask(sz):
    # 0 on and below the diagonal, -inf above
    return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)


def create_mask(src, tgt, pad_idx):
    # src: (S, B), tgt: (T, B)
    tgt_mask = generate_square_subsequent_mask(tgt.shape[0])
    src_padding_mask = (src == pad_idx).transpose(0, 1)  # (B, S) True = pad
    tgt_padding_mask = (tgt == pad_idx).transpose(0, 1)  # (B, T)
    return tgt_mask, src_padding_mask, tgt_padding_mask
