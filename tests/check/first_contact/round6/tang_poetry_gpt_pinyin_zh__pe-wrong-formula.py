# -*- coding: utf-8 -*-
# =====================================================================
#  第七课：用 Transformer 写唐诗（字级别语言模型）
#  课程作业 —— 变量名统一用拼音，方便大家对照讲义
#
#  结构按照原论文（Attention Is All You Need）的解码器来写，但是去掉了交叉注意力：
#    词嵌入 × sqrt(d_model)  +  正弦位置编码（sin 放偶数位，cos 放奇数位）
#    每层：  x = LayerNorm(x + 掩码自注意力(x))
#           x = LayerNorm(x + 前馈网络(x))        （Post-LN，最后不再额外加 LayerNorm）
#  训练目标：用前 t 个字预测第 t+1 个字，填充符 <pad> 不计入损失。
# =====================================================================
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------- 数据：几首五言绝句 ----------------
shi_ji = [
    "床前明月光，疑是地上霜。举头望明月，低头思故乡。",
    "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
    "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
    "红豆生南国，春来发几枝。愿君多采撷，此物最相思。",
    "松下问童子，言师采药去。只在此山中，云深不知处。",
]
# 故意加几句短的，让一个 batch 里长度不一样（需要填充）
shi_ji += ["床前明月光，疑是地上霜。", "春眠不觉晓，处处闻啼鸟。"]

TIAN_CHONG, KAI_SHI, JIE_SHU = "<pad>", "<s>", "</s>"
zi_biao = [TIAN_CHONG, KAI_SHI, JIE_SHU] + sorted(set("".join(shi_ji)))
zi_dao_id = {z: i for i, z in enumerate(zi_biao)}
PAD_ID = zi_dao_id[TIAN_CHONG]


def bian_ma(ju_zi):
    """把一首诗变成 id 序列：<s> 字 字 ... </s>"""
    return [zi_dao_id[KAI_SHI]] + [zi_dao_id[z] for z in ju_zi] + [zi_dao_id[JIE_SHU]]


def zu_pi(shi_list):
    """组 batch，右侧填充 <pad>"""
    xu_lie = [bian_ma(s) for s in shi_list]
    zui_chang = max(len(x) for x in xu_lie)
    pi = torch.full((len(xu_lie), zui_chang), PAD_ID, dtype=torch.long)
    for i, x in enumerate(xu_lie):
        pi[i, : len(x)] = torch.tensor(x)
    return pi


# ---------------- 模型 ----------------
class WeiZhiBianMa(nn.Module):
    """正弦位置编码，不参与训练，所以注册成 buffer"""

    def __init__(self, wei_du, zui_chang=512):
        super().__init__()
        wei_zhi = torch.arange(zui_chang, dtype=torch.float).unsqueeze(1)  # (L, 1)
        pin_lv = torch.pow(10000.0, -2 * torch.arange(0, wei_du, 2).float() / wei_du)  # 1 / 10000^(2i/d)
        pe = torch.zeros(zui_chang, wei_du)
        pe[:, 0::2] = torch.sin(wei_zhi * pin_lv)
        pe[:, 1::2] = torch.cos(wei_zhi * pin_lv)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, L, d)

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class DuoTouZhuYiLi(nn.Module):
    """多头自注意力（多头注意力 = duo tou zhu yi li）"""

    def __init__(self, wei_du, tou_shu, diu_qi=0.1):
        super().__init__()
        assert wei_du % tou_shu == 0
        self.tou_shu = tou_shu
        self.mei_tou = wei_du // tou_shu
        self.W_q = nn.Linear(wei_du, wei_du)
        self.W_k = nn.Linear(wei_du, wei_du)
        self.W_v = nn.Linear(wei_du, wei_du)
        self.W_o = nn.Linear(wei_du, wei_du)
        self.diu_qi = nn.Dropout(diu_qi)

    def forward(self, x, zhe_zhao):
        # x: (B, T, d)   zhe_zhao: (B, 1, T, T)，True 表示可以看
        B, T, _ = x.shape
        q = self.W_q(x).view(B, T, self.tou_shu, self.mei_tou).transpose(1, 2)
        k = self.W_k(x).view(B, T, self.tou_shu, self.mei_tou).transpose(1, 2)
        v = self.W_v(x).view(B, T, self.tou_shu, self.mei_tou).transpose(1, 2)

        fen_shu = q @ k.transpose(-2, -1) / math.sqrt(self.mei_tou)  # 分数
        fen_shu = fen_shu.masked_fill(zhe_zhao == 0, -1e9)
        quan_zhong = self.diu_qi(torch.softmax(fen_shu, dim=-1))  # 权重

        shu_chu = (quan_zhong @ v).transpose(1, 2).contiguous().view(B, T, -1)  # 输出
        return self.W_o(shu_chu)


class QianKui(nn.Module):
    """前馈网络（qian kui）：Linear -> ReLU -> Linear"""

    def __init__(self, wei_du, zhong_jian, diu_qi=0.1):
        super().__init__()
        self.fc1 = nn.Linear(wei_du, zhong_jian)
        self.fc2 = nn.Linear(zhong_jian, wei_du)
        self.diu_qi = nn.Dropout(diu_qi)

    def forward(self, x):
        return self.fc2(self.diu_qi(F.relu(self.fc1(x))))


class JieMaCeng(nn.Module):
    """解码层（jie ma ceng），Post-LN"""

    def __init__(self, wei_du, tou_shu, zhong_jian, diu_qi=0.1):
        super().__init__()
        self.zhu_yi_li = DuoTouZhuYiLi(wei_du, tou_shu, diu_qi)
        self.qian_kui = QianKui(wei_du, zhong_jian, diu_qi)
        self.gui_yi_1 = nn.LayerNorm(wei_du)  # 归一化
        self.gui_yi_2 = nn.LayerNorm(wei_du)
        self.diu_qi = nn.Dropout(diu_qi)

    def forward(self, x, zhe_zhao):
        x = self.gui_yi_1(x + self.diu_qi(self.zhu_yi_li(x, zhe_zhao)))
        x = self.gui_yi_2(x + self.diu_qi(self.qian_kui(x)))
        return x


class TangShiGPT(nn.Module):
    def __init__(self, zi_shu, wei_du=128, tou_shu=4, ceng_shu=3, zhong_jian=512, diu_qi=0.1):
        super().__init__()
        self.wei_du = wei_du
        self.qian_ru = nn.Embedding(zi_shu, wei_du, padding_idx=PAD_ID)  # 嵌入
        self.wei_zhi = WeiZhiBianMa(wei_du)
        self.diu_qi = nn.Dropout(diu_qi)
        self.ceng = nn.ModuleList([JieMaCeng(wei_du, tou_shu, zhong_jian, diu_qi) for _ in range(ceng_shu)])
        self.shu_chu_ceng = nn.Linear(wei_du, zi_shu)

    def zuo_zhe_zhao(self, x):
        """因果遮罩 & 填充遮罩，合成 (B, 1, T, T)"""
        T = x.size(1)
        yin_guo = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))  # 因果：只能看前面
        tian_chong = (x != PAD_ID)[:, None, None, :]  # 填充：不看 <pad>
        return yin_guo[None, None] & tian_chong

    def forward(self, x):
        zhe_zhao = self.zuo_zhe_zhao(x)
        h = self.qian_ru(x) * math.sqrt(self.wei_du)  # 论文 3.4 节：嵌入乘 sqrt(d_model)
        h = self.diu_qi(self.wei_zhi(h))
        for ceng in self.ceng:
            h = ceng(h, zhe_zhao)
        return self.shu_chu_ceng(h)


def ji_suan_sun_shi(mo_xing, pi):
    """计算损失：输入去掉最后一个字，目标去掉第一个字（错开一位）"""
    shu_ru = pi[:, :-1]
    mu_biao = pi[:, 1:]
    logits = mo_xing(shu_ru)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), mu_biao.reshape(-1), ignore_index=PAD_ID)


@torch.no_grad()
def xie_shi(mo_xing, kai_tou="床", zui_duo=24):
    """贪心地续写一首诗"""
    mo_xing.eval()
    ids = bian_ma(kai_tou)[:-1]  # 去掉 </s>
    for _ in range(zui_duo):
        logits = mo_xing(torch.tensor([ids]))
        xia_yi_ge = logits[0, -1].argmax().item()
        if xia_yi_ge == zi_dao_id[JIE_SHU]:
            break
        ids.append(xia_yi_ge)
    return "".join(zi_biao[i] for i in ids[1:])


if __name__ == "__main__":
    torch.manual_seed(2024)
    pi = zu_pi(shi_ji)
    print("字表大小:", len(zi_biao), " batch 形状:", tuple(pi.shape))
    mo_xing = TangShiGPT(len(zi_biao), wei_du=128, tou_shu=4, ceng_shu=3)
    you_hua_qi = torch.optim.Adam(mo_xing.parameters(), lr=1e-3)  # 优化器
    for lun in range(60):  # 轮
        mo_xing.train()
        sun_shi = ji_suan_sun_shi(mo_xing, pi)
        you_hua_qi.zero_grad()
        sun_shi.backward()
        you_hua_qi.step()
        if lun % 10 == 0:
            print(f"第 {lun} 轮  损失 {sun_shi.item():.4f}")
    print("续写：", xie_shi(mo_xing, "床"))
    print("续写：", xie_shi(mo_xing, "白日"))
