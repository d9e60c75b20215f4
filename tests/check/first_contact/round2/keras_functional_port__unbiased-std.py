"""PyTorch port of the Keras example "Text classification with Transformer".

The Keras version builds the graph with the functional API:

    inputs = layers.Input(shape=(maxlen,))
    x = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)(inputs)
    x = TransformerBlock(embed_dim, num_heads, ff_dim)(x)
    x = layers.GlobalAveragePooling1D()(x)
    ...

To stay close to it I create all the layers in build_model(config) (like the
Input/Dense calls) and write the "graph" as a plain function run(model, ids, pad_mask).

pad_mask follows the Keras convention: an int tensor, 1 = keep, 0 = padding.
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class LayerNormalization(nn.Module):
    """Same arguments as keras.layers.LayerNormalization."""

    def __init__(self, units, axis=-1, epsilon=1e-3):
        super().__init__()
        self.axis = axis
        self.epsilon = epsilon
        self.gamma = nn.Parameter(torch.ones(units))
        self.beta = nn.Parameter(torch.zeros(units))

    def forward(self, x):
        mean = x.mean(dim=self.axis, keepdim=True)
        std = x.std(dim=self.axis, keepdim=True)
        return self.gamma * (x - mean) / (std + self.epsilon) + self.beta


def build_model(config):
    d = config["embed_dim"]
    m = nn.ModuleDict()
    # TokenAndPositionEmbedding
    m["token_emb"] = nn.Embedding(config["vocab_size"], d)
    m["pos_emb"] = nn.Embedding(config["maxlen"], d)
    # TransformerBlock(s)
    blocks = nn.ModuleList()
    for _ in range(config["num_blocks"]):
        blk = nn.ModuleDict()
        blk["query"] = nn.Linear(d, d)
        blk["key"] = nn.Linear(d, d)
        blk["value"] = nn.Linear(d, d)
        blk["attention_output"] = nn.Linear(d, d)
        blk["ffn_1"] = nn.Linear(d, config["ff_dim"])
        blk["ffn_2"] = nn.Linear(config["ff_dim"], d)
        blk["layernorm1"] = LayerNormalization(d, epsilon=1e-6)
        blk["layernorm2"] = LayerNormalization(d, epsilon=1e-6)
        blk["dropout1"] = nn.Dropout(config["rate"])
        blk["dropout2"] = nn.Dropout(config["rate"])
        blocks.append(blk)
    m["blocks"] = blocks
    # classifier head
    m["dropout"] = nn.Dropout(0.1)
    m["dense"] = nn.Linear(d, 20)
    m["classifier"] = nn.Linear(20, config["num_classes"])
    m.num_heads = config["num_heads"]
    return m


def multi_head_attention(blk, x, pad_mask, num_heads):
    # keras.layers.MultiHeadAttention with key_dim = embed_dim // num_heads
    b, t, d = x.shape
    key_dim = d // num_heads

    def heads(z):
        return z.reshape(b, t, num_heads, key_dim).permute(0, 2, 1, 3)   # (b, h, t, key_dim)

    q = heads(blk["query"](x))
    k = heads(blk["key"](x))
    v = heads(blk["value"](x))
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(key_dim)
    mask = pad_mask[:, None, None, :].float()          # (b, 1, 1, t), 1 = keep
    scores = scores + (1.0 - mask) * -1e9
    weights = torch.softmax(scores, dim=-1)
    context = torch.matmul(weights, v).permute(0, 2, 1, 3).reshape(b, t, d)
    return blk["attention_output"](context)


def transformer_block(blk, inputs, pad_mask, num_heads):
    attn_output = multi_head_attention(blk, inputs, pad_mask, num_heads)
    attn_output = blk["dropout1"](attn_output)
    out1 = blk["layernorm1"](inputs + attn_output)
    ffn_output = blk["ffn_2"](F.relu(blk["ffn_1"](out1)))
    ffn_output = blk["dropout2"](ffn_output)
    return blk["layernorm2"](out1 + ffn_output)


def run(model, ids, pad_mask):
    positions = torch.arange(ids.shape[1], device=ids.device)
    x = model["token_emb"](ids) + model["pos_emb"](positions)[None]
    for blk in model["blocks"]:
        x = transformer_block(blk, x, pad_mask, model.num_heads)
    # GlobalAveragePooling1D (masked)
    m = pad_mask.unsqueeze(-1).float()
    x = (x * m).sum(1) / m.sum(1).clamp(min=1.0)
    x = model["dropout"](x)
    x = F.relu(model["dense"](x))
    x = model["dropout"](x)
    return model["classifier"](x)  # logits; softmax lives in the loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab_size", type=int, default=100)
    parser.add_argument("--maxlen", type=int, default=16)
    parser.add_argument("--embed_dim", type=int, default=32)
    parser.add_argument("--num_heads", type=int, default=2)
    parser.add_argument("--ff_dim", type=int, default=32)
    parser.add_argument("--num_blocks", type=int, default=1)
    parser.add_argument("--num_classes", type=int, default=2)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=10)
    config = vars(parser.parse_args())

    torch.manual_seed(42)
    model = build_model(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    # fake "imdb": random ids, random lengths, padded with 0 at the end
    n = 64
    lengths = torch.randint(4, config["maxlen"] + 1, (n,))
    ids = torch.randint(1, config["vocab_size"], (n, config["maxlen"]))
    ids[torch.arange(config["maxlen"])[None, :] >= lengths[:, None]] = PAD
    labels = torch.randint(0, config["num_classes"], (n,))

    model.train()
    for step in range(config["steps"]):
        idx = torch.randint(0, n, (16,))
        batch = ids[idx]
        pad_mask = (batch != PAD).long()
        logits = run(model, batch, pad_mask)
        loss = F.cross_entropy(logits, labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        acc = (run(model, ids, (ids != PAD).long()).argmax(-1) == labels).float().mean()
    print("train acc", acc.item())


if __name__ == "__main__":
    main()
