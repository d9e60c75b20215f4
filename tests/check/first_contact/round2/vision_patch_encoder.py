"""Small patch-based image encoder (ViT-ish), written from scratch for a course project.

image (B, 3, 12, 12) -> 4x4 patches via a strided conv -> 9 tokens + [cls]
-> learned position embedding -> pre-norm blocks -> final norm -> classify from [cls]
"""
import torch
import torch.nn as nn


class PatchEmbed(nn.Module):
    def __init__(self, img_size=12, patch_size=4, in_chans=3, embed_dim=48):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)                    # B, C, H/p, W/p
        return x.flatten(2).transpose(1, 2)  # B, N, C


class Attention(nn.Module):
    def __init__(self, dim, heads=3, attn_drop=0.0, proj_drop=0.0):
        super().__init__()
        self.heads = heads
        self.d_head = dim // heads
        self.scale = self.d_head ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).unflatten(-1, (3, self.heads, self.d_head))  # B, N, 3, heads, d_head
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)                  # each B, heads, N, d_head
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        out = (attn @ v).transpose(1, 2).flatten(2)                     # B, N, C
        return self.proj_drop(self.proj(out))


class MLP(nn.Module):
    def __init__(self, dim, hidden, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.drop(self.act(self.fc1(x)))
        return self.drop(self.fc2(x))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2.0, drop=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads, attn_drop=drop, proj_drop=drop)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = MLP(dim, int(dim * mlp_ratio), drop)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


class PatchEncoder(nn.Module):
    def __init__(self, img_size=12, patch_size=4, in_chans=3, num_classes=10,
                 dim=48, depth=2, heads=3, mlp_ratio=2.0, drop=0.1):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, dim)
        n = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n + 1, dim))
        self.pos_drop = nn.Dropout(drop)
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp_ratio, drop) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward_features(self, imgs):
        x = self.patch_embed(imgs)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed
        x = self.pos_drop(x)
        x = self.blocks(x)
        return self.norm(x)

    def forward(self, imgs):
        feats = self.forward_features(imgs)
        return self.head(feats[:, 0])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PatchEncoder()
    model.eval()
    imgs = torch.randn(4, 3, 12, 12)
    with torch.no_grad():
        logits = model(imgs)
    print("logits", tuple(logits.shape))
    print("pred", logits.argmax(-1).tolist())
    print("params", sum(p.numel() for p in model.parameters()))
