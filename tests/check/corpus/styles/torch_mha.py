"""A small decoder-only language model whose blocks use torch's nn.MultiheadAttention (batch_first),
Pre-LN, a causal mask built once and a key padding mask for the padded batches (True = padding)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 64
D_MODEL = 32
N_HEAD = 4
N_LAYER = 2
MAX_LEN = 32
PAD = 0


class DecoderBlock(nn.Module):
    def __init__(self, d_model=D_MODEL, n_head=N_HEAD, dropout=0.1):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x, causal_mask, padding_mask=None):
        h = self.ln1(x)
        # causal_mask: (T, T) bool, True = may NOT attend; padding_mask: (B, T) bool, True = padding
        a, _ = self.attn(h, h, h, attn_mask=causal_mask, key_padding_mask=padding_mask, need_weights=False)
        x = x + a
        x = x + self.ffn(self.ln2(x))
        return x


class TinyLM(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=D_MODEL, n_head=N_HEAD, n_layer=N_LAYER, max_len=MAX_LEN, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([DecoderBlock(d_model, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("causal", torch.triu(torch.ones(max_len, max_len, dtype=torch.bool), diagonal=1))

    def forward(self, ids):
        B, T = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))
        padding_mask = ids == PAD
        for blk in self.blocks:
            x = blk(x, self.causal[:T, :T], padding_mask)
        return self.head(self.ln_f(x))

    def loss(self, ids):
        """next-token loss on a padded batch: predict ids[:, 1:] from ids[:, :-1], padding ignored"""
        logits = self(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1), ignore_index=PAD)
