# ---------------------------------------------------------------------------
# Homework 3, Part B -- "Attention by hand"
# Name: ___________   Student ID: ___________
#
# Rules from the handout: no einsum, no nn.MultiheadAttention, no F.scaled_dot_product_attention.
# Write the attention with explicit Python loops over batch, heads and positions so that every
# multiply is visible.  Vectorised code gets 0 points for this part.
#
# Spec:
#   * tokens: LongTensor (B, T), PAD = 0 at the end of each row
#   * mask[b][i][j] = 1 if BOTH token i and token j of example b are real, else 0
#   * masked scores are set to -1e9 before the softmax (so a padded query row becomes uniform
#     instead of NaN -- its output is thrown away later anyway)
#   * Post-LN encoder layer as in Vaswani et al.:  x = LN(x + MHA(x));  x = LN(x + FFN(x))
#   * LayerNorm written by hand, population variance (divide by D), eps inside the sqrt
# ---------------------------------------------------------------------------
import math

import torch
import torch.nn as nn

PAD = 0
NEG_INF = -1e9


def softmax_1d(scores):
    # scores: 1-D tensor. Subtract the max for numerical stability.
    m = scores.max()
    e = torch.exp(scores - m)
    return e / e.sum()


def build_mask(tokens):
    B, T = tokens.shape
    mask = torch.zeros(B, T, T)
    for b in range(B):
        for i in range(T):
            for j in range(T):
                if tokens[b, i] != PAD and tokens[b, j] != PAD:
                    mask[b, i, j] = 1.0
    return mask


class LoopMultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, x, mask):
        B, T, _ = x.shape
        Q = self.W_q(x)
        K = self.W_k(x)
        V = self.W_v(x)
        batch_out = []
        for b in range(B):
            rows = []
            for i in range(T):
                head_outs = []
                for h in range(self.n_heads):
                    lo, hi = h * self.d_k, (h + 1) * self.d_k
                    q_i = Q[b, i, lo:hi]
                    scores = []
                    for j in range(T):
                        k_j = K[b, j, lo:hi]
                        s = torch.dot(q_i, k_j)
                        if mask[b, i, j] == 0:
                            s = s * 0 + NEG_INF
                        scores.append(s)
                    weights = softmax_1d(torch.stack(scores))
                    out_h = torch.zeros(self.d_k)
                    for j in range(T):
                        out_h = out_h + weights[j] * V[b, j, lo:hi]
                    head_outs.append(out_h)
                rows.append(torch.cat(head_outs))  # concat heads -> (d_model,)
            batch_out.append(torch.stack(rows))
        concat = torch.stack(batch_out)  # (B, T, d_model)
        return self.W_o(concat)


class LoopLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        B, T, D = x.shape
        out = []
        for b in range(B):
            rows = []
            for t in range(T):
                v = x[b, t]
                mu = v.sum() / D
                var = ((v - mu) ** 2).sum() / D
                rows.append(self.gamma * (v - mu) / torch.sqrt(var + self.eps) + self.beta)
            out.append(torch.stack(rows))
        return torch.stack(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.lin2(torch.relu(self.lin1(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.mha = LoopMultiHeadAttention(d_model, n_heads)
        self.ln1 = LoopLayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff)
        self.ln2 = LoopLayerNorm(d_model)

    def forward(self, x, mask):
        x = self.ln1(x + self.mha(x, mask))
        x = self.ln2(x + self.ffn(x))
        return x


def positional_encoding(T, d_model):
    pe = torch.zeros(T, d_model)
    for pos in range(T):
        for i in range(0, d_model, 2):
            angle = pos / (10000 ** (i / d_model))
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


class TinyEncoder(nn.Module):
    def __init__(self, vocab_size, d_model=16, n_heads=2, d_ff=32, n_layers=2, n_classes=2):
        super().__init__()
        self.d_model = d_model
        self.emb = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.layers = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.cls = nn.Linear(d_model, n_classes)

    def forward(self, tokens):
        B, T = tokens.shape
        mask = build_mask(tokens)
        x = self.emb(tokens) * math.sqrt(self.d_model) + positional_encoding(T, self.d_model)
        for layer in self.layers:
            x = layer(x, mask)
        # average over the real tokens only
        keep = (tokens != PAD).float().unsqueeze(-1)
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.cls(pooled), x


# ----------------------------- sanity checks -------------------------------
torch.manual_seed(3)
tokens = torch.tensor(
    [
        [5, 9, 2, 7, 3, 0, 0],
        [4, 4, 8, 1, 6, 2, 9],
        [7, 3, 0, 0, 0, 0, 0],
    ]
)
labels = torch.tensor([1, 0, 1])
model = TinyEncoder(vocab_size=10)
logits, hidden = model(tokens)
print("logits shape:", tuple(logits.shape))  # expect (3, 2)
print("hidden shape:", tuple(hidden.shape))  # expect (3, 7, 16)
print("hidden finite:", bool(torch.isfinite(hidden).all()))

# Part B.4: a few SGD steps -- the loss should go down
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for it in range(3):
    logits, _ = model(tokens)
    loss = nn.functional.cross_entropy(logits, labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"iter {it}: loss = {loss.item():.4f}")
