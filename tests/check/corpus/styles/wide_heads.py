"""
Transformers from scratch, after a well-known blog post: "wide" heads (every head sees the full
embedding, k x heads values per token), queries and keys each scaled by k^(1/4), a Post-LN block.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def mask_(matrices, maskval=0.0, mask_diagonal=True):
    """
    Masks out all values in the given batch of matrices where i <= j holds,
    i < j if mask_diagonal is false

    In place operation
    """
    h, w = matrices.size(-2), matrices.size(-1)
    indices = torch.triu_indices(h, w, offset=0 if mask_diagonal else 1)
    matrices[..., indices[0], indices[1]] = maskval


class SelfAttention(nn.Module):
    def __init__(self, k, heads=4, mask=False):
        super().__init__()
        self.k, self.heads, self.mask = k, heads, mask
        # these compute the queries, keys and values for all heads (as a single concatenated vector)
        self.tokeys = nn.Linear(k, k * heads, bias=False)
        self.toqueries = nn.Linear(k, k * heads, bias=False)
        self.tovalues = nn.Linear(k, k * heads, bias=False)
        # this unifies the outputs of the different heads into a single k-vector
        self.unifyheads = nn.Linear(heads * k, k)

    def forward(self, x):
        b, t, k = x.size()
        h = self.heads
        queries = self.toqueries(x).view(b, t, h, k)
        keys = self.tokeys(x).view(b, t, h, k)
        values = self.tovalues(x).view(b, t, h, k)

        # - fold heads into the batch dimension
        keys = keys.transpose(1, 2).contiguous().view(b * h, t, k)
        queries = queries.transpose(1, 2).contiguous().view(b * h, t, k)
        values = values.transpose(1, 2).contiguous().view(b * h, t, k)

        # - scale queries and keys each by the fourth root of k: together 1/sqrt(k), and smaller numbers
        queries = queries / (k ** (1 / 4))
        keys = keys / (k ** (1 / 4))

        # - get dot product of queries and keys, and scale
        dot = torch.bmm(queries, keys.transpose(1, 2))  # (b*h, t, t)
        if self.mask:  # mask out the upper half of the dot matrix, excluding the diagonal
            mask_(dot, maskval=float('-inf'), mask_diagonal=False)
        dot = F.softmax(dot, dim=2)  # - dot now has row-wise self-attention probabilities

        # apply the self attention to the values
        out = torch.bmm(dot, values).view(b, h, t, k)
        # swap h, t back, unify heads
        out = out.transpose(1, 2).contiguous().view(b, t, h * k)
        return self.unifyheads(out)


class TransformerBlock(nn.Module):
    def __init__(self, k, heads=4, mask=False, ff_hidden_mult=4, dropout=0.0):
        super().__init__()
        self.attention = SelfAttention(k, heads=heads, mask=mask)
        self.norm1 = nn.LayerNorm(k)
        self.norm2 = nn.LayerNorm(k)
        self.ff = nn.Sequential(
            nn.Linear(k, ff_hidden_mult * k),
            nn.ReLU(),
            nn.Linear(ff_hidden_mult * k, k))
        self.do = nn.Dropout(dropout)

    def forward(self, x):
        attended = self.attention(x)
        x = self.norm1(attended + x)
        x = self.do(x)
        fedforward = self.ff(x)
        x = self.norm2(fedforward + x)
        x = self.do(x)
        return x


class GTransformer(nn.Module):
    """ Transformer for generating text (character by character). """

    def __init__(self, emb=32, heads=4, depth=2, seq_length=16, num_tokens=50):
        super().__init__()
        self.num_tokens = num_tokens
        self.token_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=num_tokens)
        self.pos_embedding = nn.Embedding(embedding_dim=emb, num_embeddings=seq_length)
        tblocks = [TransformerBlock(k=emb, heads=heads, mask=True) for _ in range(depth)]
        self.tblocks = nn.Sequential(*tblocks)
        self.toprobs = nn.Linear(emb, num_tokens)

    def forward(self, x):
        """ x: (b, t) tensor of token indices; returns (b, t, num_tokens) log-probabilities """
        tokens = self.token_embedding(x)
        b, t, e = tokens.size()
        positions = self.pos_embedding(torch.arange(t, device=x.device))[None, :, :].expand(b, t, e)
        x = tokens + positions
        x = self.tblocks(x)
        x = self.toprobs(x.view(b * t, e)).view(b, t, self.num_tokens)
        return F.log_softmax(x, dim=2)
