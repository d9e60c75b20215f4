# Perceiver-style latent encoder for sequence classification.
# (Started as a "swin windows" experiment, ended up as a Perceiver - file name stayed.)
# A small learned latent array cross-attends to the (long) input once,
# then a few self-attention blocks run on the latents only. Pre-LN, GELU MLPs.
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 80
SEQ_LEN = 12
NUM_LATENTS = 6
LATENT_DIM = 32
INPUT_DIM = 32
HEADS = 4
DIM_HEAD = 8
SELF_DEPTH = 2
NUM_CLASSES = 5
PAD = 0


class Attention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=HEADS, dim_head=DIM_HEAD):
        super().__init__()
        inner_dim = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.heads = heads
        self.scale = inner_dim ** -0.5
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_kv = nn.Linear(context_dim, inner_dim * 2, bias=False)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def forward(self, x, context=None, mask=None):
        # x: (b, n, d)  context: (b, m, dc)  mask: (b, m) True = real token
        h = self.heads
        context = x if context is None else context
        q = self.to_q(x)
        k, v = self.to_kv(context).chunk(2, dim=-1)

        b, n, _ = q.shape
        m = k.shape[1]
        q = q.view(b, n, h, -1).transpose(1, 2)
        k = k.view(b, m, h, -1).transpose(1, 2)
        v = v.view(b, m, h, -1).transpose(1, 2)

        sim = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        if mask is not None:
            sim = sim.masked_fill(~mask[:, None, None, :], -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult), nn.GELU(), nn.Linear(dim * mult, dim))

    def forward(self, x):
        return self.net(x)


class LatentBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm_attn = nn.LayerNorm(dim)
        self.attn = Attention(dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = FeedForward(dim)

    def forward(self, lat):
        lat = lat + self.attn(self.norm_attn(lat))
        lat = lat + self.ff(self.norm_ff(lat))
        return lat


class PerceiverClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_emb = nn.Embedding(VOCAB, INPUT_DIM)
        self.pos_emb = nn.Embedding(SEQ_LEN, INPUT_DIM)
        self.latents = nn.Parameter(torch.randn(NUM_LATENTS, LATENT_DIM) * 0.02)

        # cross attention: queries = latents, keys/values = input
        self.cross_norm_latents = nn.LayerNorm(LATENT_DIM)
        self.cross_norm_context = nn.LayerNorm(INPUT_DIM)
        self.cross_attn = Attention(LATENT_DIM, context_dim=INPUT_DIM, heads=1, dim_head=LATENT_DIM)
        self.cross_ff_norm = nn.LayerNorm(LATENT_DIM)
        self.cross_ff = FeedForward(LATENT_DIM)

        self.blocks = nn.ModuleList([LatentBlock(LATENT_DIM) for _ in range(SELF_DEPTH)])
        self.norm_out = nn.LayerNorm(LATENT_DIM)
        self.head = nn.Linear(LATENT_DIM, NUM_CLASSES)

    def forward(self, ids):
        b, n = ids.shape
        mask = ids != PAD
        x = self.token_emb(ids) + self.pos_emb(torch.arange(n))
        lat = self.latents.unsqueeze(0).expand(b, -1, -1)

        lat = lat + self.cross_attn(self.cross_norm_latents(lat), context=self.cross_norm_context(x), mask=mask)
        lat = lat + self.cross_ff(self.cross_ff_norm(lat))

        for blk in self.blocks:
            lat = blk(lat)

        lat = self.norm_out(lat)
        return self.head(lat.mean(dim=1))


torch.manual_seed(42)
model = PerceiverClassifier()
model.eval()

ids = torch.randint(1, VOCAB, (4, SEQ_LEN))
ids[1, 7:] = PAD
ids[3, 4:] = PAD

with torch.no_grad():
    logits = model(ids)
print("logits", logits.shape)
print("pred", logits.argmax(-1).tolist())
print("probs", F.softmax(logits, -1)[0])
