"""第 2 步 · 掩码：填充掩码与因果掩码 | Step 2 · Masks: padding and causal

中文：注意力需要两种掩码，约定都是 **1 / True = 可以注意**。

1. 填充掩码 `padding_mask(seq, pad_idx)`：一批句子补齐到同样长度，补上的 `<pad>` 不能被注意。
   `(B, S)` 的词 id → `(B, 1, 1, S)` 的 bool，`seq != pad_idx` 处为 True；中间两个 1 维让它
   广播到 `(B, h, Tq, S)`：每个头、每个查询都挡住同样的键。
2. 因果掩码 `subsequent_mask(size)`：解码器训练时一次看到整句目标，位置 i 只能看 j ≤ i，
   不然它会“偷看”下一个要预测的词（训练损失很低，贪心解码却全错）。返回 `(1, size, size)` 的 bool，
   下三角（含对角线）为 True。常见错误：用 `triu` 写反了方向，或对角线错一位（看不到自己）。
3. `target_mask(tgt, pad_idx)`：解码器自注意力两者都要：`padding_mask(tgt) & subsequent_mask(T)` →
   `(B, 1, T, T)`。

English: attention needs two masks, both with **1 / True = may attend**.

1. `padding_mask(seq, pad_idx)`: a batch is padded to one length and the `<pad>` tokens must not be
   attended. `(B, S)` ids -> `(B, 1, 1, S)` bool, True where `seq != pad_idx`; the two 1-dims let it
   broadcast to `(B, h, Tq, S)`: every head and every query blocks the same keys.
2. `subsequent_mask(size)`: in training the decoder sees the whole target at once, and position i may
   only look at j <= i, or it peeks at the token it must predict (the training loss falls, greedy
   decoding fails). Returns `(1, size, size)` bool, True on and below the diagonal. Classic slips:
   `triu` the wrong way round, or the diagonal off by one (a position that cannot see itself).
3. `target_mask(tgt, pad_idx)`: the decoder's self-attention needs both:
   `padding_mask(tgt) & subsequent_mask(T)` -> `(B, 1, T, T)`.

评分 · Graded by: `scratchformer check exercises/02_masks.py` (the causal mask: `no-causal-mask`,
including an off-by-one diagonal; your `padding_mask` also tells the checker your mask convention)
and `python exercises/_grade.py exercises/02_masks.py` (exact values of all three on a small batch).
参考答案 · Solution: `exercises/solutions/02_masks.py`.
"""
import torch


def padding_mask(seq, pad_idx=0):
    raise NotImplementedError('TODO 02a: (seq != pad_idx) 再 unsqueeze 两次成 (B, 1, 1, S) · (seq != pad_idx).unsqueeze(1).unsqueeze(2) -> (B, 1, 1, S), True = real token')


def subsequent_mask(size):
    raise NotImplementedError('TODO 02b: 下三角（含对角线）为 True，形状 (1, size, size) · torch.tril(torch.ones(1, size, size)).bool(): position i may see j <= i')


def target_mask(tgt, pad_idx=0):
    raise NotImplementedError('TODO 02c: 两个掩码相与 · padding_mask(tgt, pad_idx) & subsequent_mask(tgt.size(1)) -> (B, 1, T, T)')
