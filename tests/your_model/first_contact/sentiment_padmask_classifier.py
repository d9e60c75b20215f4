"""
HW3 - sentiment classifier with a transformer encoder I wrote myself.

The model takes a batch of token ids (B, T) plus a padding mask (B, T)
where True means "this position is padding, ignore it" (same convention
as key_padding_mask in nn.MultiheadAttention). It returns class logits (B, C).

Running this file trains on random data for a few hundred steps as a smoke test.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------- hyperparameters ----------------
VOCAB_SIZE = 5000
NUM_CLASSES = 3
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
D_FF = 4 * D_MODEL
MAX_LEN = 128
DROPOUT = 0.1
PAD_IDX = 0

BATCH_SIZE = 32
SEQ_LEN = 48
LR = 3e-4
NUM_STEPS = 500
PRINT_EVERY = 50
SEED = 42
# -------------------------------------------------


class SelfAttention(nn.Module):
    def __init__(self, d_model=D_MODEL, n_heads=N_HEADS, dropout=DROPOUT):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, H, T, hd)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)

        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # (B, H, T, T)
        if pad_mask is not None:
            # pad_mask: (B, T), True = padding -> nobody may attend to it
            att = att.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.drop(att)

        y = att @ v                                       # (B, H, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # back to (B, T, C)
        return self.proj(y)


class EncoderLayer(nn.Module):
    """post-LN like the original paper"""

    def __init__(self, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF, dropout=DROPOUT):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads, dropout)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Linear(d_ff, d_model),
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, pad_mask=None):
        x = self.norm1(x + self.drop(self.attn(x, pad_mask)))
        x = self.norm2(x + self.drop(self.ff(x)))
        return x


class SentimentTransformer(nn.Module):
    def __init__(self, n_vocab=VOCAB_SIZE, n_classes=NUM_CLASSES, d_model=D_MODEL,
                 n_heads=N_HEADS, n_layers=N_LAYERS, d_ff=D_FF, max_len=MAX_LEN,
                 dropout=DROPOUT, pad_idx=PAD_IDX):
        super().__init__()
        self.pad_idx = pad_idx
        self.max_len = max_len
        self.tok_emb = nn.Embedding(n_vocab, d_model, padding_idx=pad_idx)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)]
        )
        self.fc = nn.Linear(d_model, n_classes)

    def forward(self, ids, mask=None):
        # ids: (B, T) token ids
        # mask: (B, T) bool, True where ids is padding
        if mask is None:
            mask = ids == self.pad_idx
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device).unsqueeze(0)  # (1, T)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(pos))
        for layer in self.layers:
            x = layer(x, mask)

        # mean over the real (non-pad) tokens only
        keep = (~mask).unsqueeze(-1).float()                  # (B, T, 1)
        pooled = (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return self.fc(pooled)                                # (B, n_classes)


def random_batch(batch_size=BATCH_SIZE, seq_len=SEQ_LEN):
    """fake data: random sentences of random length, right-padded with PAD_IDX.
    label = first token mod NUM_CLASSES so there is actually something to learn"""
    ids = torch.randint(1, VOCAB_SIZE, (batch_size, seq_len))
    lengths = torch.randint(4, seq_len + 1, (batch_size,))
    pad = torch.arange(seq_len)[None, :] >= lengths[:, None]
    ids[pad] = PAD_IDX
    labels = ids[:, 0] % NUM_CLASSES
    return ids, pad, labels


if __name__ == "__main__":
    torch.manual_seed(SEED)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    model = SentimentTransformer().to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params: {n_params/1e3:.1f}K")

    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    criterion = nn.CrossEntropyLoss()

    t0 = time.time()
    for step in range(NUM_STEPS):
        model.train()
        ids, mask, labels = random_batch()
        ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)

        logits = model(ids, mask)
        loss = criterion(logits, labels)

        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        if step % PRINT_EVERY == 0 or step == NUM_STEPS - 1:
            acc = (logits.argmax(-1) == labels).float().mean().item()
            print(f"step {step:4d} | loss {loss.item():.4f} | acc {acc:.3f} | {time.time()-t0:.1f}s")

    model.eval()
    with torch.no_grad():
        ids, mask, labels = random_batch(4)
        out = model(ids.to(device), mask.to(device))
    print("output shape:", out.shape)  # torch.Size([4, 3])
