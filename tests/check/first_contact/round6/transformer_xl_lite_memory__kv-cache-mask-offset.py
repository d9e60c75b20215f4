# Transformer-XL "lite" -- segment-level recurrence without the relative position machinery.
#
# My notes from reading Dai et al. 2019 + the kimiyoung/transformer-xl code:
#   - the text is cut into segments of `tgt_len` tokens; each layer caches the hidden states
#     it saw for the last `mem_len` tokens ("mems") and the next segment attends over [mems; h]
#   - mems are detached: no gradient flows into the previous segment
#   - I use ABSOLUTE sinusoidal positions (sin | cos halves, like their PositionalEmbedding)
#     with a running offset instead of the relative r_w_bias/r_r_bias terms -- simpler.
#   - post-norm blocks (pre_lnorm=False in their default config), ReLU FFN
#   - word embeddings scaled by sqrt(d_model) (emb_scale in AdaptiveEmbedding)
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class PositionalEmbedding(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        inv_freq = 1 / (10000 ** (torch.arange(0.0, d_model, 2.0) / d_model))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, pos_seq):
        sinusoid_inp = torch.outer(pos_seq, self.inv_freq)
        return torch.cat([sinusoid_inp.sin(), sinusoid_inp.cos()], dim=-1)  # (T, d_model)


class MemAttention(nn.Module):
    def __init__(self, n_head, d_model, d_head, dropout, dropatt):
        super().__init__()
        self.n_head = n_head
        self.d_head = d_head
        self.q_net = nn.Linear(d_model, n_head * d_head, bias=False)
        self.kv_net = nn.Linear(d_model, 2 * n_head * d_head, bias=False)
        self.o_net = nn.Linear(n_head * d_head, d_model, bias=False)
        self.drop = nn.Dropout(dropout)
        self.dropatt = nn.Dropout(dropatt)
        self.scale = 1 / (d_head ** 0.5)

    def _split(self, x):
        bsz, length, _ = x.size()
        return x.view(bsz, length, self.n_head, self.d_head).transpose(1, 2)

    def forward(self, h, mem=None):
        # h: (B, T, d_model)   mem: (B, M, d_model) or None
        bsz, qlen, _ = h.size()
        cat = h if mem is None else torch.cat([mem, h], dim=1)
        mlen = cat.size(1) - qlen

        q = self._split(self.q_net(h))  # (B, H, T, d)
        k, v = self.kv_net(cat).chunk(2, dim=-1)
        k, v = self._split(k), self._split(v)  # (B, H, M+T, d)

        score = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # (B, H, T, M+T)
        # query i sits at absolute slot mlen + i, so it may look at keys 0 .. mlen + i
        future = torch.triu(torch.ones(qlen, mlen + qlen, dtype=torch.bool, device=h.device), diagonal=1)
        score = score.masked_fill(future, float("-inf"))
        prob = self.dropatt(F.softmax(score, dim=-1))

        vec = torch.matmul(prob, v).transpose(1, 2).contiguous().view(bsz, qlen, self.n_head * self.d_head)
        return self.drop(self.o_net(vec))


class PositionwiseFF(nn.Module):
    def __init__(self, d_model, d_inner, dropout):
        super().__init__()
        self.core = nn.Sequential(
            nn.Linear(d_model, d_inner),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(d_inner, d_model),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        return self.core(x)


class XLLayer(nn.Module):
    def __init__(self, n_head, d_model, d_head, d_inner, dropout, dropatt):
        super().__init__()
        self.attn = MemAttention(n_head, d_model, d_head, dropout, dropatt)
        self.ff = PositionwiseFF(d_model, d_inner, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, h, mem=None):
        h = self.norm1(h + self.attn(h, mem))
        h = self.norm2(h + self.ff(h))
        return h


class XLLite(nn.Module):
    def __init__(self, n_token, n_layer=4, n_head=4, d_model=128, d_inner=512, dropout=0.1, dropatt=0.0, mem_len=32):
        super().__init__()
        self.d_model = d_model
        self.mem_len = mem_len
        self.word_emb = nn.Embedding(n_token, d_model, padding_idx=PAD)
        self.emb_scale = d_model ** 0.5
        self.pos_emb = PositionalEmbedding(d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [XLLayer(n_head, d_model, d_model // n_head, d_inner, dropout, dropatt) for _ in range(n_layer)]
        )
        self.out = nn.Linear(d_model, n_token)

    def init_mems(self):
        return [None] * len(self.layers)

    def _update_mems(self, hids, mems):
        new_mems = []
        with torch.no_grad():
            for h, m in zip(hids, mems):
                cat = h if m is None else torch.cat([m, h], dim=1)
                new_mems.append(cat[:, -self.mem_len :].detach())
        return new_mems

    def forward(self, inp, mems=None, offset=0):
        # inp: (B, T) token ids of ONE segment; offset = how many tokens came before it
        if mems is None:
            mems = self.init_mems()
        qlen = inp.size(1)
        pos_seq = torch.arange(offset, offset + qlen, device=inp.device, dtype=torch.float32)
        h = self.word_emb(inp) * self.emb_scale + self.pos_emb(pos_seq)[None]
        h = self.drop(h)

        hids = []
        for layer, mem in zip(self.layers, mems):
            hids.append(h)  # cache the *input* of each layer, as in the paper
            h = layer(h, mem)
        new_mems = self._update_mems(hids, mems)
        return self.out(h), new_mems


def segment_losses(model, data, tgt_len):
    """data: (B, L) padded token stream. Returns the mean loss over all segments."""
    mems = None
    total, count = 0.0, 0
    for i in range(0, data.size(1) - 1, tgt_len):
        seq_len = min(tgt_len, data.size(1) - 1 - i)
        inp = data[:, i : i + seq_len]
        tgt = data[:, i + 1 : i + 1 + seq_len]
        logits, mems = model(inp, mems, offset=i)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), ignore_index=PAD, reduction="sum")
        total = total + loss
        count += (tgt != PAD).sum().item()
    return total / max(count, 1)


def main():
    torch.manual_seed(1234)
    n_token = 50
    # three "documents" of different length, right-padded with PAD
    lengths = [61, 48, 37]
    data = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for b, n in enumerate(lengths):
        data[b, :n] = torch.randint(1, n_token, (n,))

    model = XLLite(n_token, n_layer=3, n_head=4, d_model=64, d_inner=256, mem_len=24)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    for epoch in range(3):
        model.train()
        loss = segment_losses(model, data, tgt_len=16)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}  ppl {math.exp(loss.item()):.1f}")

    model.eval()
    with torch.no_grad():
        mems = None
        for i in range(0, 48, 16):
            logits, mems = model(data[:, i : i + 16], mems, offset=i)
            print("segment", i // 16, "logits", tuple(logits.shape), "mem", tuple(mems[0].shape))


if __name__ == "__main__":
    main()
