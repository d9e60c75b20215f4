"""The catalogue of what `scratchformer check` can name: stable ids, one line in Chinese and English each.

An id is stable: tools, the exercises and the docs link to it, so an id is never renamed or reused.
A **bug** fails the check (exit 1); a **note** says which of two legitimate choices the code made
(Post-LN vs Pre-LN, ReLU vs GELU, no bias, −1e9 vs −∞) and does not fail; a **warning** is a real
hazard that is not a wrong number on ordinary inputs (a fully masked row giving NaN).
Each id has a section of the bridge page (docs/from-the-tutorials.md) that explains it.
"""
from __future__ import annotations

from dataclasses import dataclass

BRIDGE = "docs/from-the-tutorials.md"


@dataclass(frozen=True)
class Entry:
    id: str
    severity: str  # "bug" | "note" | "warning"
    zh: str
    en: str
    anchor: str  # a section of the bridge page

    @property
    def link(self) -> str:
        return f"{BRIDGE}#{self.anchor}"


_ENTRIES = [
    # bugs: each one has its own heading in the bridge page's section 12 (the anchor is the id)
    Entry("missing-scale", "bug",
          "注意力分数没有除以 √d_k：分数过大，softmax 饱和，梯度几乎为 0，模型学不动。",
          "The scores are not divided by √d_k: they grow with d_k, softmax saturates and the gradients vanish.",
          "missing-scale"),
    Entry("wrong-scale", "bug",
          "缩放因子错了：应当除以 √d_k（每个头的维度），而不是 √d_model 或 d_k。",
          "The scores are scaled by the wrong factor: divide by √d_k (one head's size), not √d_model or d_k.",
          "wrong-scale"),
    Entry("mask-fill-zero", "bug",
          "被屏蔽的分数填成了 0 而不是 −1e9 / −∞：exp(0) = 1，模型照样关注 padding。",
          "Masked scores are filled with 0 instead of −1e9 / −∞: exp(0) = 1, so padding still gets attention.",
          "mask-fill-zero"),
    Entry("mask-inverted", "bug",
          "掩码方向反了：注意力屏蔽了真实的词、保留了 padding（与掩码的约定相反）。",
          "The mask is applied the wrong way round: attention hides the real tokens and keeps the padding.",
          "mask-inverted"),
    Entry("softmax-dim", "bug",
          "softmax 的维度错了：应当沿最后一维（对所有 key）归一化，每个 query 的权重和为 1。",
          "softmax runs over the wrong dimension: normalise over the keys (the last one), so each query's weights sum to 1.",
          "softmax-dim"),
    Entry("heads-not-transposed", "bug",
          "拆分多头时直接 view 成 (B, h, T, d_k)，把不同位置的数混进同一个头；应先 view 成 (B, T, h, d_k) 再 transpose(1, 2)。",
          "The heads are split with a bare view to (B, h, T, d_k), which mixes positions; view to (B, T, h, d_k), then transpose(1, 2).",
          "heads-not-transposed"),
    Entry("heads-merge-order", "bug",
          "合并多头的顺序错了：应先 transpose(1, 2) 回到 (B, T, h, d_k)，再 view 成 (B, T, d_model)。",
          "The heads are merged in the wrong order: transpose(1, 2) back to (B, T, h, d_k), then view to (B, T, d_model).",
          "heads-merge-order"),
    Entry("unbiased-std", "bug",
          "LayerNorm 用了 x.std()（无偏，除以 d−1）并把 eps 加在根号外；论文和 nn.LayerNorm 用有偏方差，eps 在根号内。",
          "LayerNorm uses x.std() (unbiased, divides by d−1) with eps outside the root; nn.LayerNorm uses the biased variance with eps inside.",
          "unbiased-std"),
    Entry("pe-not-buffer", "bug",
          "位置编码表不是用 register_buffer 注册的：它不在 state_dict 里，也不会随 .to(device) 移动。",
          "The positional table is not a registered buffer: it is missing from state_dict() and does not move with .to(device).",
          "pe-not-buffer"),
    Entry("pe-wrong-formula", "bug",
          "位置编码的公式不对：PE[p, 2i] = sin(p / 10000^(2i/d))，PE[p, 2i+1] = cos(p / 10000^(2i/d))。",
          "The positional table is not the paper's: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).",
          "pe-wrong-formula"),
    Entry("no-residual", "bug",
          "子层缺少残差连接 x + Sublayer(x)：没有这条捷径，深层网络的梯度传不回去。",
          "A sublayer has no residual connection x + Sublayer(x): without it the gradient cannot reach the lower layers.",
          "no-residual"),
    Entry("ffn-no-activation", "bug",
          "前馈网络的两层线性之间没有激活函数：两层线性叠在一起仍然只是一层线性。",
          "The feed-forward block has no activation between its two linear layers: two linear maps are one linear map.",
          "ffn-no-activation"),
    Entry("no-causal-mask", "bug",
          "解码器自注意力的因果掩码缺失或对角线错位：每个位置应能看到自己和之前的词，看不到之后的词。",
          "The decoder's causal mask is missing or off by one: each position must see itself and the past, never the future.",
          "no-causal-mask"),
    Entry("cross-attention-kv", "bug",
          "交叉注意力的 K 和 V 取自解码器自己，而不是编码器的输出 memory。",
          "Cross-attention reads K and V from the decoder instead of the encoder's output (memory).",
          "cross-attention-kv"),
    Entry("unknown-difference", "bug",
          "输出和参考实现不同，但不是目录里已知的错误；下面给出第一个不同的位置。",
          "The output differs from the reference, but not in a way the catalogue knows; the first differing position is shown.",
          "unknown-difference"),
    # the warning
    Entry("all-masked-nan", "warning",
          "整行都被屏蔽（全是 padding）时输出 NaN（用 −∞ 填充的结果）；一个全 padding 的序列会让损失变成 NaN。",
          "A row with nothing to attend to (all padding) gives NaN, as −∞ fills do; one all-padding sequence makes the loss NaN.",
          "all-masked-nan"),
    # notes: choices, not failures
    Entry("post-ln", "note", "Post-LN（论文的写法）：x = LayerNorm(x + Sublayer(x))。",
          "Post-LN (as in the paper): x = LayerNorm(x + Sublayer(x)).", "7-post-ln-as-in-the-paper-vs-pre-ln"),
    Entry("pre-ln", "note", "Pre-LN：x = x + Sublayer(LayerNorm(x))，比论文的 Post-LN 更容易训练。",
          "Pre-LN: x = x + Sublayer(LayerNorm(x)), easier to train than the paper's Post-LN.",
          "7-post-ln-as-in-the-paper-vs-pre-ln"),
    Entry("activation-relu", "note", "前馈网络用 ReLU（论文的选择）。", "The feed-forward block uses ReLU (the paper's choice).",
          "12-what-scratchformer-check-names"),
    Entry("activation-gelu", "note", "前馈网络用 GELU（BERT/GPT 的选择），不是论文的 ReLU。",
          "The feed-forward block uses GELU (BERT's and GPT's choice), not the paper's ReLU.",
          "12-what-scratchformer-check-names"),
    Entry("no-bias", "note", "线性层没有偏置（d2l 的选择）；参考实现也用零偏置来比较。",
          "The linear layers have no bias (d2l's choice); the reference was compared with zero biases.",
          "12-what-scratchformer-check-names"),
    Entry("mask-fill-1e9", "note", "用 −1e9 填充被屏蔽的分数：全屏蔽的行得到均匀权重（不是 NaN）。",
          "Masked scores are filled with −1e9: a fully masked row gets uniform weights (not NaN).",
          "2-01-masks-and-1e9-vs-boolean-masks-and"),
    Entry("mask-fill-inf", "note", "用 −∞ 填充被屏蔽的分数。", "Masked scores are filled with −∞.",
          "2-01-masks-and-1e9-vs-boolean-masks-and"),
    Entry("pe-sin-cos-halves", "note", "位置编码把 sin 放前一半、cos 放后一半（TensorFlow 教程的写法），论文是交错排列；只是维度的排列不同。",
          "The positional table puts sin in the first half and cos in the second (the TensorFlow tutorial's layout), not interleaved; a permutation of dimensions.",
          "5-the-positional-table-on-the-right-device"),
    Entry("pe-learned", "note", "位置编码是可学习的参数，不是正弦表；没有按公式比较。",
          "The positions are learned parameters, not the sinusoid; not compared with the formula.",
          "5-the-positional-table-on-the-right-device"),
    Entry("embed-scale", "note", "嵌入乘以 √d_model（论文的写法）。", "The embeddings are multiplied by √d_model (as in the paper).",
          "4-d-embedding-scaling-and-where-dropout-sits"),
]

CATALOGUE: dict[str, Entry] = {e.id: e for e in _ENTRIES}
BUG_IDS = tuple(e.id for e in _ENTRIES if e.severity == "bug" and e.id != "unknown-difference")
