"""Tiny CTC speech recogniser: log-mel frames -> conv subsampling -> Transformer encoder -> CTC.

Written for the ASR lab (week 9). Layout follows the ESPnet / WeNet "transformer" encoder:
  * Conv2dSubsampling (x4 in time) turns (B, T, n_mels) into (B, T', d_model)
  * sinusoidal positions, input scaled by sqrt(d_model) (ESPnet's xscale)
  * Pre-LN blocks (normalize_before=True) and a final `after_norm`
  * position-wise FFN with ReLU (ESPnet's transformer default, not swish)
  * a linear CTC head with blank = 0

Features are padded with zeros at the end; `feat_lens` holds the real number of frames.
"""
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class Conv2dSubsampling(nn.Module):
    """Two 3x3 convs with stride 2: time and frequency both shrink ~4x."""

    def __init__(self, n_mels: int, d_model: int):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, d_model, kernel_size=3, stride=2),
            nn.ReLU(),
            nn.Conv2d(d_model, d_model, kernel_size=3, stride=2),
            nn.ReLU(),
        )
        f_out = ((n_mels - 1) // 2 - 1) // 2
        self.out = nn.Linear(d_model * f_out, d_model)

    def forward(self, x, lengths):
        # x: (B, T, F)
        x = x.unsqueeze(1)  # (B, 1, T, F)
        x = self.conv(x)  # (B, C, T', F')
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        return x, lengths


class PositionalEncoding(nn.Module):
    def __init__(self, d_model: int, dropout: float, max_len: int = 2000):
        super().__init__()
        self.d_model = d_model
        self.xscale = math.sqrt(d_model)
        self.dropout = nn.Dropout(dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float32).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0), persistent=False)

    def forward(self, x):
        x = x * self.xscale + self.pe[:, : x.size(1)]
        return self.dropout(x)


class MultiHeadedAttention(nn.Module):
    def __init__(self, n_head: int, n_feat: int, dropout_rate: float):
        super().__init__()
        assert n_feat % n_head == 0
        self.d_k = n_feat // n_head
        self.h = n_head
        self.linear_q = nn.Linear(n_feat, n_feat)
        self.linear_k = nn.Linear(n_feat, n_feat)
        self.linear_v = nn.Linear(n_feat, n_feat)
        self.linear_out = nn.Linear(n_feat, n_feat)
        self.dropout = nn.Dropout(p=dropout_rate)

    def forward(self, query, key, value, mask):
        # mask: (B, 1, T2), True/1 = real frame
        n_batch = query.size(0)
        q = self.linear_q(query).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k).transpose(1, 2)

        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            mask = mask.unsqueeze(1).eq(0)  # (B, 1, 1, T2), True = padding
            min_value = torch.finfo(scores.dtype).min
            scores = scores.masked_fill(mask, min_value)
            attn = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
        else:
            attn = torch.softmax(scores, dim=-1)

        p_attn = self.dropout(attn)
        x = torch.matmul(p_attn, v)  # (B, h, T1, d_k)
        x = x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)
        return self.linear_out(x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, idim: int, hidden_units: int, dropout_rate: float):
        super().__init__()
        self.w_1 = nn.Linear(idim, hidden_units)
        self.w_2 = nn.Linear(hidden_units, idim)
        self.dropout = nn.Dropout(dropout_rate)
        self.activation = nn.ReLU()

    def forward(self, x):
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout_rate):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(size, eps=1e-12)
        self.norm2 = nn.LayerNorm(size, eps=1e-12)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, x, mask):
        residual = x
        x = self.norm1(x)
        x = residual + self.dropout(self.self_attn(x, x, x, mask))

        residual = x
        x = self.norm2(x)
        x = residual + self.dropout(self.feed_forward(x))
        return x, mask


class TransformerEncoder(nn.Module):
    def __init__(self, n_mels=80, d_model=144, n_heads=4, d_ff=576, num_blocks=4, dropout=0.1):
        super().__init__()
        self.embed = Conv2dSubsampling(n_mels, d_model)
        self.pos_enc = PositionalEncoding(d_model, dropout)
        self.encoders = nn.ModuleList(
            [
                EncoderLayer(
                    d_model,
                    MultiHeadedAttention(n_heads, d_model, dropout),
                    PositionwiseFeedForward(d_model, d_ff, dropout),
                    dropout,
                )
                for _ in range(num_blocks)
            ]
        )
        self.after_norm = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, xs, xs_lens):
        xs, olens = self.embed(xs, xs_lens)
        xs = self.pos_enc(xs)
        t = xs.size(1)
        masks = (torch.arange(t, device=xs.device)[None, :] < olens[:, None]).unsqueeze(1)  # (B, 1, T')
        for layer in self.encoders:
            xs, masks = layer(xs, masks)
        xs = self.after_norm(xs)
        return xs, olens


class CTCModel(nn.Module):
    def __init__(self, vocab_size=32, **enc_kwargs):
        super().__init__()
        self.encoder = TransformerEncoder(**enc_kwargs)
        d_model = self.encoder.after_norm.normalized_shape[0]
        self.ctc_lo = nn.Linear(d_model, vocab_size)
        self.blank = 0

    def forward(self, feats, feat_lens):
        enc, enc_lens = self.encoder(feats, feat_lens)
        log_probs = F.log_softmax(self.ctc_lo(enc), dim=-1)  # (B, T', V)
        return log_probs, enc_lens

    def compute_loss(self, feats, feat_lens, ys, ys_lens):
        log_probs, enc_lens = self(feats, feat_lens)
        loss = F.ctc_loss(
            log_probs.transpose(0, 1),  # ctc_loss wants (T, B, V)
            ys,
            enc_lens,
            ys_lens,
            blank=self.blank,
            reduction="sum",
            zero_infinity=True,
        )
        return loss / feats.size(0)

    @torch.no_grad()
    def greedy_decode(self, feats, feat_lens):
        log_probs, enc_lens = self(feats, feat_lens)
        best = log_probs.argmax(-1)
        hyps = []
        for b in range(best.size(0)):
            prev, out = self.blank, []
            for tok in best[b, : enc_lens[b]].tolist():
                if tok != prev and tok != self.blank:
                    out.append(tok)
                prev = tok
            hyps.append(out)
        return hyps


def make_batch(lengths, n_mels=80, vocab_size=32, max_label=12):
    """Random 'utterances' padded with zeros + random label sequences padded with -1."""
    feats = torch.zeros(len(lengths), max(lengths), n_mels)
    for i, n in enumerate(lengths):
        feats[i, :n] = torch.randn(n, n_mels)
    feat_lens = torch.tensor(lengths)
    label_lens = [random.randint(3, max_label) for _ in lengths]
    ys = torch.full((len(lengths), max(label_lens)), -1, dtype=torch.long)
    for i, n in enumerate(label_lens):
        ys[i, :n] = torch.randint(1, vocab_size, (n,))
    return feats, feat_lens, ys, torch.tensor(label_lens)


if __name__ == "__main__":
    torch.manual_seed(0)
    random.seed(0)
    model = CTCModel(vocab_size=32, n_mels=80, d_model=144, n_heads=4, d_ff=576, num_blocks=4)
    print("params:", sum(p.numel() for p in model.parameters()))

    feats, feat_lens, ys, ys_lens = make_batch([120, 96, 70])
    opt = torch.optim.Adam(model.parameters(), lr=5e-4)
    for step in range(5):
        model.train()
        loss = model.compute_loss(feats, feat_lens, ys, ys_lens)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        print(f"step {step} ctc loss {loss.item():.3f}")

    model.eval()
    log_probs, enc_lens = model(feats, feat_lens)
    print("log_probs", tuple(log_probs.shape), "enc_lens", enc_lens.tolist())
    print("hyps", model.greedy_decode(feats, feat_lens))
