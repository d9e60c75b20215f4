# -*- coding: utf-8 -*-
# 第七讲 作业：从零实现一个仅解码器（GPT 式）的字符级语言模型
# 要点：因果自注意力 + 正弦位置编码 + 前馈网络 + Pre-LN 残差
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2024)

# ---------------- 超参数 ----------------
层数 = 2
配置 = {
    "词表大小": None,  # 由语料决定，后面再填
    "d_model": 32,
    "头数": 4,
    "层数": 层数,
    "最大长度": 16,
    "dropout": 0.0,
    "pad_id": 0,
}


class 正弦位置编码(nn.Module):
    """Attention Is All You Need 里的位置编码：偶数维 sin，奇数维 cos。"""

    def __init__(self, d_model, 最大长度):
        super().__init__()
        pe = torch.zeros(最大长度, d_model)
        位置 = torch.arange(0, 最大长度, dtype=torch.float).unsqueeze(1)
        分母 = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(位置 * 分母)
        pe[:, 1::2] = torch.cos(位置 * 分母)
        # 注册成 buffer：不参与训练，但会跟着 .to(device) 和 state_dict 走
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        # x: (B, T, d_model)
        return x + self.pe[:, : x.size(1)]


class 因果自注意力(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg["d_model"] % cfg["头数"] == 0
        self.头数 = cfg["头数"]
        self.qkv = nn.Linear(cfg["d_model"], 3 * cfg["d_model"])
        self.输出投影 = nn.Linear(cfg["d_model"], cfg["d_model"])
        self.dropout = nn.Dropout(cfg["dropout"])
        # 下三角矩阵：第 i 个位置只能看到 0..i
        self.register_buffer("因果掩码", torch.tril(torch.ones(cfg["最大长度"], cfg["最大长度"])))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # 拆成多头: (B, T, C) -> (B, 头数, T, 每头维度)
        q = q.view(B, T, self.头数, C // self.头数).transpose(1, 2)
        k = k.view(B, T, self.头数, C // self.头数).transpose(1, 2)
        v = v.view(B, T, self.头数, C // self.头数).transpose(1, 2)

        分数 = q @ k.transpose(-2, -1) / math.sqrt(k.size(-1))  # 除以 sqrt(每头维度)
        分数 = 分数.masked_fill(self.因果掩码[:T, :T] == 0, float("-inf"))
        权重 = F.softmax(分数, dim=-1)
        权重 = self.dropout(权重)
        输出 = 权重 @ v  # (B, 头数, T, 每头维度)
        输出 = 输出.transpose(1, 2).contiguous().view(B, T, C)  # 合并多头
        return self.输出投影(输出)


class 前馈网络(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(cfg["d_model"], 4 * cfg["d_model"]),
            nn.GELU(),
            nn.Linear(4 * cfg["d_model"], cfg["d_model"]),
            nn.Dropout(cfg["dropout"]),
        )

    def forward(self, x):
        return self.net(x)


class 解码块(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg["d_model"])
        self.注意力 = 因果自注意力(cfg)
        self.ln2 = nn.LayerNorm(cfg["d_model"])
        self.前馈 = 前馈网络(cfg)

    def forward(self, x):
        x = x + self.注意力(self.ln1(x))  # Pre-LN：先归一化再进子层
        x = x + self.前馈(self.ln2(x))
        return x


class 小型GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.词嵌入 = nn.Embedding(cfg["词表大小"], cfg["d_model"])
        self.位置编码 = 正弦位置编码(cfg["d_model"], cfg["最大长度"])
        self.块列表 = nn.ModuleList([解码块(cfg) for _ in range(cfg["层数"])])
        self.ln_最终 = nn.LayerNorm(cfg["d_model"])
        self.lm_head = nn.Linear(cfg["d_model"], cfg["词表大小"], bias=False)

    def forward(self, 输入, targets=None):
        x = self.词嵌入(输入) * math.sqrt(self.cfg["d_model"])
        x = self.位置编码(x)
        for 块 in self.块列表:
            x = 块(x)
        x = self.ln_最终(x)
        logits = self.lm_head(x)

        loss = None
        if targets is not None:
            # 第 t 个位置预测第 t+1 个字，所以要错开一位
            logits_移位 = logits.contiguous()
            targets_移位 = targets.contiguous()
            loss = F.cross_entropy(
                logits_移位.view(-1, logits_移位.size(-1)),
                targets_移位.view(-1),
                ignore_index=self.cfg["pad_id"],  # 填充位置不算损失
            )
        return logits, loss


# ---------------- 数据：几句古诗 ----------------
语料 = ["床前明月光", "疑是地上霜", "举头望明月", "低头思故乡", "春眠不觉晓处处闻啼鸟"]
字表 = ["<pad>"] + sorted(set("".join(语料)))
字到id = {字: i for i, 字 in enumerate(字表)}
配置["词表大小"] = len(字表)

最长 = max(len(句) for 句 in 语料)
数据 = torch.full((len(语料), 最长), 配置["pad_id"], dtype=torch.long)
for i, 句 in enumerate(语料):
    数据[i, : len(句)] = torch.tensor([字到id[字] for 字 in 句])

# ---------------- 训练 ----------------
模型 = 小型GPT(配置)
优化器 = torch.optim.AdamW(模型.parameters(), lr=3e-3)
for 步 in range(12):
    _, 损失 = 模型(数据, targets=数据)
    优化器.zero_grad()
    损失.backward()
    优化器.step()
    if 步 % 4 == 0:
        print(f"第 {步} 步，损失 = {损失.item():.4f}")

# ---------------- 生成 ----------------
模型.eval()
with torch.no_grad():
    序列 = torch.tensor([[字到id["床"]]])
    for _ in range(4):
        logits, _ = 模型(序列)
        下一个 = logits[:, -1].argmax(-1, keepdim=True)
        序列 = torch.cat([序列, 下一个], dim=1)
print("".join(字表[i] for i in 序列[0].tolist()))
