# 课堂练习：最简单的 Transformer 编码器
# 全局变量
import math
import torch
import torch.nn as nn

词表大小 = 50
维度 = 32
头数 = 4
前馈维度 = 64
层数 = 2
最大长度 = 16
填充 = 0


class 位置编码(nn.Module):
    def __init__(self):
        super().__init__()
        表 = torch.zeros(最大长度, 维度)
        位置 = torch.arange(0, 最大长度).unsqueeze(1).float()
        分母 = torch.exp(torch.arange(0, 维度, 2).float() * (-math.log(10000.0) / 维度))
        表[:, 0::2] = torch.sin(位置 * 分母)  # 偶数维用 sin
        表[:, 1::2] = torch.sin(位置 * 分母)  # 奇数维用 cos
        self.register_buffer("表", 表.unsqueeze(0))

    def forward(self, x):
        return x + self.表[:, : x.size(1)]


class 注意力(nn.Module):
    def __init__(self):
        super().__init__()
        self.每头维度 = 维度 // 头数
        self.查询 = nn.Linear(维度, 维度)
        self.键 = nn.Linear(维度, 维度)
        self.值 = nn.Linear(维度, 维度)
        self.输出 = nn.Linear(维度, 维度)

    def forward(self, x, 掩码):
        批, 长, _ = x.shape
        # 切成多头: (批, 头数, 长, 每头维度)
        q = self.查询(x).view(批, 长, 头数, self.每头维度).transpose(1, 2)
        k = self.键(x).view(批, 长, 头数, self.每头维度).transpose(1, 2)
        v = self.值(x).view(批, 长, 头数, self.每头维度).transpose(1, 2)
        分数 = q @ k.transpose(-2, -1) / math.sqrt(self.每头维度)
        分数 = 分数.masked_fill(掩码 == 0, -1e9)  # 掩码为 0 的位置是填充
        权重 = torch.softmax(分数, dim=-1)
        结果 = 权重 @ v
        结果 = 结果.transpose(1, 2).contiguous().view(批, 长, 维度)  # 合并多头
        return self.输出(结果)


class 前馈(nn.Module):
    def __init__(self):
        super().__init__()
        self.线性1 = nn.Linear(维度, 前馈维度)
        self.线性2 = nn.Linear(前馈维度, 维度)

    def forward(self, x):
        return self.线性2(torch.relu(self.线性1(x)))


class 层归一化(nn.Module):
    def __init__(self, eps=1e-5):
        super().__init__()
        self.增益 = nn.Parameter(torch.ones(维度))
        self.偏置 = nn.Parameter(torch.zeros(维度))
        self.eps = eps

    def forward(self, x):
        均值 = x.mean(-1, keepdim=True)
        方差 = x.var(-1, keepdim=True, unbiased=False)
        return self.增益 * (x - 均值) / torch.sqrt(方差 + self.eps) + self.偏置


class 编码层(nn.Module):
    def __init__(self):
        super().__init__()
        self.注意力 = 注意力()
        self.前馈 = 前馈()
        self.归一1 = 层归一化()
        self.归一2 = 层归一化()

    def forward(self, x, 掩码):
        # 后归一化 (Post-LN)，和原论文一样
        x = self.归一1(x + self.注意力(x, 掩码))
        x = self.归一2(x + self.前馈(x))
        return x


class 编码器(nn.Module):
    def __init__(self):
        super().__init__()
        self.嵌入 = nn.Embedding(词表大小, 维度)
        self.位置 = 位置编码()
        self.层们 = nn.ModuleList([编码层() for _ in range(层数)])

    def forward(self, 输入):
        掩码 = (输入 != 填充).unsqueeze(1).unsqueeze(2)  # (批, 1, 1, 长)
        x = self.嵌入(输入) * math.sqrt(维度)
        x = self.位置(x)
        for 层 in self.层们:
            x = 层(x, 掩码)
        return x


torch.manual_seed(0)
模型 = 编码器()
模型.eval()
for 第几批 in range(3):
    输入 = torch.randint(1, 词表大小, (2, 10))
    输入[1, 7:] = 填充  # 第二句有填充
    输出 = 模型(输入)
    print("第", 第几批, "批 输出形状:", 输出.shape)
