"""
Token classification (NER-ish) encoder.

I didn't want to depend on einops, so all the head split / merge is done with
Tensor.unflatten / movedim / flatten:
    (B, T, D) --unflatten--> (B, T, H, Dh) --movedim--> (B, H, T, Dh)
and back again. Post-LN blocks, GELU MLP, learned absolute positions.
attention_mask follows the HF convention: 1 = real token, 0 = padding.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)

    def split_heads(self, x):
        # b t (h d) -> b h t d
        return x.unflatten(-1, (self.n_heads, self.d_head)).movedim(2, 1)

    def merge_heads(self, x):
        # b h t d -> b t (h d)
        return x.movedim(1, 2).flatten(-2)

    def forward(self, x, attention_mask=None):
        q = self.split_heads(self.q_proj(x))
        k = self.split_heads(self.k_proj(x))
        v = self.split_heads(self.v_proj(x))

        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)   # b h t s
        if attention_mask is not None:
            keep = attention_mask[:, None, None, :].bool()          # b 1 1 s
            scores = scores.masked_fill(keep, torch.finfo(scores.dtype).min)
        probs = scores.softmax(dim=-1)
        probs = self.attn_drop(probs)
        out = probs @ v                                              # b h t d
        return self.out_proj(self.merge_heads(out))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads, dropout)
        self.ln1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.GELU(),
            nn.Linear(d_ff, d_model),
        )
        self.ln2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, attention_mask=None):
        # post-LN, like the original paper / BERT
        x = self.ln1(x + self.drop(self.attn(x, attention_mask)))
        x = self.ln2(x + self.drop(self.mlp(x)))
        return x


class TokenClassifier(nn.Module):
    def __init__(self, vocab_size, n_labels, d_model=48, n_heads=3, d_ff=96,
                 n_layers=2, max_len=32, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, d_model)   # learned absolute positions
        self.emb_ln = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)]
        )
        self.classifier = nn.Linear(d_model, n_labels)

    def forward(self, input_ids, attention_mask=None):
        T = input_ids.size(1)
        pos = torch.arange(T, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)[None]
        x = self.drop(self.emb_ln(x))
        for layer in self.layers:
            x = layer(x, attention_mask)
        return self.classifier(x)        # b t n_labels


def demo():
    torch.manual_seed(0)
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    model = TokenClassifier(vocab_size=60, n_labels=len(labels))

    input_ids = torch.tensor([
        [5, 17, 23, 8, 41, 12, 9, 3],
        [7, 33, 2, 19, 0, 0, 0, 0],
        [11, 4, 28, 0, 0, 0, 0, 0],
    ])
    attention_mask = (input_ids != 0).long()          # 1 = token, 0 = pad
    tags = torch.randint(0, len(labels), input_ids.shape)
    tags[attention_mask == 0] = -100                  # don't train on padding

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for step in range(4):
        logits = model(input_ids, attention_mask=attention_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), tags.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss={loss.item():.3f}")

    model.eval()
    with torch.no_grad():
        pred = model(input_ids, attention_mask=attention_mask).argmax(-1)
    for row, m in zip(pred.tolist(), attention_mask.tolist()):
        print([labels[p] for p, keep in zip(row, m) if keep])


if __name__ == "__main__":
    demo()
