# the tutorial's additive float masks: 0 where allowed, -inf where not
"""A Transformer for translation written after the PyTorch tutorials: sequence-first tensors
(T, B, C), boolean masks where True means "may NOT attend" (as nn.Transformer takes them),
Post-LN layers as in the paper."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def generate_square_subsequent_mask(sz):
    return torch.triu(torch.full((sz, sz), float('-inf')), diagonal=1)  # 0 on and below the diagonal


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x):
        """x: (seq_len, batch_size, embedding_dim)"""
        x = x + self.pe[:x.size(0)]
        return self.dropout(x)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        # query: (L, N, E), key/value: (S, N, E)
        L, N, E = query.shape
        S = key.shape[0]
        q = self.q_proj(query).view(L, N * self.num_heads, self.head_dim).transpose(0, 1)  # (N*h, L, hd)
        k = self.k_proj(key).view(S, N * self.num_heads, self.head_dim).transpose(0, 1)    # (N*h, S, hd)
        v = self.v_proj(value).view(S, N * self.num_heads, self.head_dim).transpose(0, 1)  # (N*h, S, hd)

        scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.head_dim)  # (N*h, L, S)
        scores = scores.view(N, self.num_heads, L, S)
        if attn_mask is not None:
            scores = scores + attn_mask  # (L, S) additive
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float('-inf'))  # (N, S), True = pad
        attn = F.softmax(scores, dim=-1)
        attn = self.dropout(attn)
        out = torch.matmul(attn, v.view(N, self.num_heads, S, self.head_dim))  # (N, h, L, hd)
        out = out.permute(2, 0, 1, 3).reshape(L, N, E)  # (L, N, h*hd)
        return self.out_proj(out)


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, src_mask=None, src_key_padding_mask=None):
        src2 = self.self_attn(src, src, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        src = self.norm2(src + self.dropout2(src2))
        return src


class TransformerDecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None,
                tgt_key_padding_mask=None, memory_key_padding_mask=None):
        tgt2 = self.self_attn(tgt, tgt, tgt, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)
        tgt = self.norm1(tgt + self.dropout1(tgt2))
        tgt2 = self.multihead_attn(tgt, memory, memory, attn_mask=memory_mask,
                                   key_padding_mask=memory_key_padding_mask)
        tgt = self.norm2(tgt + self.dropout2(tgt2))
        tgt2 = self.linear2(self.dropout(F.relu(self.linear1(tgt))))
        tgt = self.norm3(tgt + self.dropout3(tgt2))
        return tgt


class Seq2SeqTransformer(nn.Module):
    def __init__(self, num_encoder_layers=2, num_decoder_layers=2, emb_size=32, nhead=4,
                 src_vocab_size=50, tgt_vocab_size=50, dim_feedforward=64, dropout=0.1):
        super().__init__()
        self.emb_size = emb_size
        self.src_tok_emb = nn.Embedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = nn.Embedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)
        self.encoder_layers = nn.ModuleList([TransformerEncoderLayer(emb_size, nhead, dim_feedforward, dropout)
                                             for _ in range(num_encoder_layers)])
        self.decoder_layers = nn.ModuleList([TransformerDecoderLayer(emb_size, nhead, dim_feedforward, dropout)
                                             for _ in range(num_decoder_layers)])
        self.generator = nn.Linear(emb_size, tgt_vocab_size)

    def encode(self, src, src_mask=None, src_padding_mask=None):
        x = self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.emb_size))  # (S, N, E)
        for layer in self.encoder_layers:
            x = layer(x, src_mask, src_padding_mask)
        return x

    def decode(self, tgt, memory, tgt_mask, tgt_padding_mask=None, memory_key_padding_mask=None):
        x = self.positional_encoding(self.tgt_tok_emb(tgt) * math.sqrt(self.emb_size))  # (T, N, E)
        for layer in self.decoder_layers:
            x = layer(x, memory, tgt_mask, None, tgt_padding_mask, memory_key_padding_mask)
        return x

    def forward(self, src, tgt, src_padding_mask=None, tgt_padding_mask=None):
        memory = self.encode(src, None, src_padding_mask)
        tgt_mask = generate_square_subsequent_mask(tgt.size(0)).to(tgt.device)
        outs = self.decode(tgt, memory, tgt_mask, tgt_padding_mask, src_padding_mask)
        return self.generator(outs)
