# Sequence labelling (NER-like) with a small Transformer encoder, no CRF.
# Layers mimic nn.TransformerEncoderLayer (post-norm, src_key_padding_mask True = pad),
# but are written by hand. Sinusoidal positions are recomputed in forward (no buffer).
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0
PAD_LABEL = -100
NUM_TAGS = 5


def sinusoidal_positions(seq_len, d_model, device=None):
    pos = torch.arange(seq_len, dtype=torch.float32, device=device)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float32, device=device)
    angle = pos / torch.pow(10000.0, i / d_model)
    pe = torch.zeros(seq_len, d_model, device=device)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


class HandMHA(nn.Module):
    def __init__(self, d_model, nhead, dropout=0.0):
        super().__init__()
        self.nhead = nhead
        self.hd = d_model // nhead
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.dropout = dropout

    def forward(self, x, key_padding_mask=None):
        b, t, d = x.shape
        qkv = self.in_proj(x).reshape(b, t, 3, self.nhead, self.hd).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / self.hd)
        if key_padding_mask is not None:
            att = att.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        att = att.softmax(dim=-1)
        att = F.dropout(att, p=self.dropout, training=self.training)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.out_proj(y)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1):
        super().__init__()
        self.self_attn = HandMHA(d_model, nhead, dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_key_padding_mask=None):
        x = src
        x = self.norm1(x + self.dropout1(self.self_attn(x, key_padding_mask=src_key_padding_mask)))
        x = self.norm2(x + self.dropout2(self.linear2(self.dropout(F.relu(self.linear1(x))))))
        return x


class Tagger(nn.Module):
    def __init__(self, vocab_size, d_model=32, nhead=2, num_layers=2, dim_ff=64, num_tags=NUM_TAGS):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        self.layers = nn.ModuleList(
            [EncoderLayer(d_model, nhead, dim_ff) for _ in range(num_layers)])
        self.classifier = nn.Linear(d_model, num_tags)

    def forward(self, tokens):
        src_key_padding_mask = tokens == PAD_ID
        x = self.embed(tokens) * math.sqrt(self.d_model)
        x = x + sinusoidal_positions(tokens.size(1), self.d_model, tokens.device)
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=src_key_padding_mask)
        return self.classifier(x)


def tagging_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                           ignore_index=PAD_LABEL)


def demo():
    torch.manual_seed(1)
    model = Tagger(vocab_size=50)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    lengths = [9, 6, 4]
    tokens = torch.full((3, 9), PAD_ID)
    labels = torch.full((3, 9), PAD_LABEL)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(1, 50, (n,))
        labels[i, :n] = torch.randint(0, NUM_TAGS, (n,))
    for step in range(5):
        model.train()
        loss = tagging_loss(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, "loss", round(loss.item(), 4))
    model.eval()
    with torch.no_grad():
        pred = model(tokens).argmax(-1)
    print("predicted tags (first sentence):", pred[0].tolist())


if __name__ == "__main__":
    demo()
