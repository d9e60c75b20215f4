# enc-only xfmr classifier. pre-LN, learned pos, [cls] token, torch sdpa.
# x: (B,T) long. attn_mask: (B,T) bool, True = attend (real token). -> (B,n_cls)
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attn(nn.Module):
    def __init__(self, d, h, p=0.0):
        super().__init__()
        self.h, self.p = h, p
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, m=None):  # m: (B,1,1,T) bool, True = attend
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m,
                                           dropout_p=self.p if self.training else 0.0)
        return self.o(y.transpose(1, 2).reshape(B, T, D))


class Block(nn.Module):
    def __init__(self, d, h, p=0.0, r=4):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.a = Attn(d, h, p)
        self.f = nn.Sequential(nn.Linear(d, r * d), nn.GELU(), nn.Linear(r * d, d), nn.Dropout(p))

    def forward(self, x, m=None):
        x = x + self.a(self.n1(x), m)
        return x + self.f(self.n2(x))


class Cls(nn.Module):
    def __init__(self, n_vocab, n_cls, d=64, h=4, L=2, T=256, p=0.0):
        super().__init__()
        self.T = T
        self.tok = nn.Embedding(n_vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, T + 1, d))
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.blocks = nn.ModuleList(Block(d, h, p) for _ in range(L))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_cls)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.cls, std=0.02)

    def forward(self, x, attn_mask=None):
        B, T = x.shape
        assert T <= self.T, (T, self.T)
        z = torch.cat([self.cls.expand(B, -1, -1), self.tok(x)], 1) + self.pos[:, : T + 1]
        m = None
        if attn_mask is not None:  # prepend True for [cls]; -> (B,1,1,T+1)
            m = torch.cat([attn_mask.new_ones(B, 1), attn_mask], 1).bool()[:, None, None, :]
        for b in self.blocks:
            z = b(z, m)
        return self.head(self.ln(z[:, 0]))
