# Pre-LN transformer encoder with a fused-qkv attention, the way xformers / timm write it.
# Uses torch's fused kernel F.scaled_dot_product_attention.
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_ID = 0


class FusedSelfAttention(nn.Module):
    def __init__(self, dim, num_heads=4, qkv_bias=True, attn_drop=0.1, proj_drop=0.0):
        super().__init__()
        assert dim % num_heads == 0, "dim should be divisible by num_heads"
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)  # [q | k | v]
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x, attn_mask=None):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, H, N, Dh)

        # attn_mask: bool, True = this query may attend to this key
        x = F.scaled_dot_product_attention(
            q, k, v,
            attn_mask=attn_mask,
            dropout_p=self.attn_drop if self.training else 0.0,
        )
        x = x.reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, drop=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = FusedSelfAttention(dim, num_heads=num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop=drop)

    def forward(self, x, attn_mask=None):
        x = x + self.attn(self.norm1(x), attn_mask=attn_mask)
        x = x + self.mlp(self.norm2(x))
        return x


class Encoder(nn.Module):
    def __init__(self, vocab_size=100, dim=48, depth=2, num_heads=4, max_len=32):
        super().__init__()
        self.tok_embed = nn.Embedding(vocab_size, dim)
        self.pos_embed = nn.Parameter(torch.zeros(1, max_len, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList([Block(dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)  # final norm, needed for pre-LN

    def forward(self, ids):
        B, N = ids.shape
        key_ok = ids != PAD_ID                       # (B, N)
        attn_mask = key_ok[:, None, None, :]          # (B, 1, 1, N) broadcast over heads and queries
        x = self.tok_embed(ids) + self.pos_embed[:, :N]
        for blk in self.blocks:
            x = blk(x, attn_mask=attn_mask)
        x = self.norm(x)
        return x


def demo():
    torch.manual_seed(0)
    enc = Encoder()
    enc.eval()
    ids = torch.tensor([
        [5, 17, 23, 9, 41, 2, 0, 0, 0, 0],
        [7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        [3, 99, 4, 0, 0, 0, 0, 0, 0, 0],
    ])
    with torch.no_grad():
        out = enc(ids)
    print("out:", tuple(out.shape))
    print("first token features:", out[:, 0, :4])
    return out


if __name__ == "__main__":
    demo()
