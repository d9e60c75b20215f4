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
    # the ids of today's GPT and LLaMA courses (issue 51)
    Entry("layernorm-wrong-axis", "bug",
          "LayerNorm 归一化的维度错了：应当对每个位置的特征（最后一维）求均值和方差，而不是对序列或 batch。",
          "LayerNorm normalises over the wrong axis: take the mean and variance over each position's features "
          "(the last dim), not over the positions or the batch.",
          "layernorm-wrong-axis"),
    Entry("eps-outside-sqrt", "bug",
          "LayerNorm 把 eps 加在根号外：(x − mean) / (std + eps)；应为 (x − mean) / √(var + eps)，方差很小时两者不同。",
          "LayerNorm adds eps outside the root, (x − mean) / (std + eps); write (x − mean) / √(var + eps): they "
          "part where the variance is small.",
          "eps-outside-sqrt"),
    Entry("post-ln-residual", "bug",
          "残差加的是归一化后的输入：y = norm(x); y + f(y)。Pre-LN 应为 x + f(norm(x))（Pre-LN 与 Post-LN 混在一起）。",
          "The residual adds the normalised input, y = norm(x); y + f(y): Pre-LN is x + f(norm(x)) (a Pre-/Post-LN mix-up).",
          "post-ln-residual"),
    Entry("extra-final-norm", "bug",
          "Post-LN 的堆叠末尾又加了一层归一化（或 Pre-LN 的每层之后又归一化）：比参考实现多一次 norm。",
          "The stack ends in one norm too many (a final norm after Post-LN layers that already end in one).",
          "extra-final-norm"),
    Entry("missing-final-norm", "bug",
          "Pre-LN 的堆叠末尾缺少最后一层归一化（GPT 的 ln_f、LLaMA 的 norm）：最后一层的输出没有归一化就送进输出层。",
          "The Pre-LN stack has no final norm (GPT's ln_f, LLaMA's norm): the last block's output reaches the head unnormalised.",
          "missing-final-norm"),
    Entry("rope-pairing", "bug",
          "旋转位置编码的配对方式混用了：cos/sin 表按一种方式（交错 2i, 2i+1 或前后两半 i, i+d/2）排列，旋转却按另一种。",
          "Rotary positions mix two pairings: the cos/sin table is laid out for one (interleaved 2i, 2i+1, or halves "
          "i, i+d/2) and the rotation uses the other.",
          "rope-pairing"),
    Entry("rope-wrong-positions", "bug",
          "旋转位置编码的位置不对：用 KV cache 时忽略了偏移 start_pos（或每段都从 0 开始），新词被当成位置 0。",
          "Rotary positions are wrong: with a KV cache the offset (start_pos) is ignored, or positions restart per "
          "chunk, so a new token is turned as if it stood at position 0.",
          "rope-wrong-positions"),
    Entry("rmsnorm-eps-outside", "bug",
          "RMSNorm 把 eps 加在根号外：x / (√mean(x²) + eps)；应为 x / √(mean(x²) + eps)。",
          "RMSNorm adds eps outside the root, x / (√mean(x²) + eps); write x / √(mean(x²) + eps).",
          "rmsnorm-eps-outside"),
    Entry("rmsnorm-mean-not-square", "bug",
          "RMSNorm 没有对平方求均值：应为 mean(x²)，而不是 mean(x)²、sum(x²) 或 mean(|x|)。",
          "RMSNorm does not take the mean of the squares: write mean(x²), not mean(x)², sum(x²) or mean(|x|).",
          "rmsnorm-mean-not-square"),
    Entry("gqa-repeat-wrong", "bug",
          "分组查询注意力复制 K/V 头的方式错了：应当用 repeat_interleave（每个 K/V 头服务相邻的几个查询头），而不是 repeat（平铺）。",
          "Grouped-query attention repeats the K/V heads the wrong way: use repeat_interleave (each K/V head serves "
          "neighbouring query heads), not repeat (tiling).",
          "gqa-repeat-wrong"),
    Entry("swiglu-wrong-gate", "bug",
          "SwiGLU 的门控写错了：应为 W₂(silu(W₁x) ⊙ W₃x)，silu 只作用在门 W₁x 上，然后逐元素相乘。",
          "The SwiGLU gate is wrong: write W₂(silu(W₁x) ⊙ W₃x), silu on the gate W₁x only, then an element-wise product.",
          "swiglu-wrong-gate"),
    Entry("kv-cache-mask-offset", "bug",
          "KV cache 下的因果掩码只按新词构造，忽略了缓存长度：新词看不到缓存里的词（或看到了未来）。",
          "With a KV cache the causal mask is built for the new tokens only and ignores the cached length: the new "
          "tokens cannot see the cache (or see the future).",
          "kv-cache-mask-offset"),
    Entry("attention-dropout-in-eval", "bug",
          "注意力里的 F.dropout 没有传 training=self.training：eval() 时还在随机丢弃，推理结果每次都不同。",
          "F.dropout in the attention has no training=self.training: it keeps dropping after eval(), so inference "
          "changes from call to call.",
          "attention-dropout-in-eval"),
    Entry("weights-not-loaded", "bug",
          "load_state_dict(strict=False) 没有加载任何权重：键名一个都没对上，模型仍是随机初始化。",
          "load_state_dict(strict=False) loaded nothing: no key matched, so the model keeps its random weights.",
          "weights-not-loaded"),
    Entry("target-not-shifted", "bug",
          "语言模型的目标没有右移一位：位置 t 应当预测第 t+1 个词，而不是它自己。",
          "The language-model targets are not shifted by one: position t must predict token t+1, not itself.",
          "target-not-shifted"),
    Entry("loss-on-padding", "bug",
          "损失把 padding 也算进去了：用 ignore_index（或掩码）把 padding 位置排除。",
          "The loss counts the padding positions: leave them out with ignore_index (or a mask).",
          "loss-on-padding"),
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
