"""第 10 步 · 贪心解码与束搜索 | Step 10 · Greedy decoding and beam search

中文：训练时解码器一次看到整句目标；生成时没有目标，只能一个词一个词地往外吐：从 `<bos>` 开始，
每一步把已经生成的词送进 `model.decode`，取最后一个位置的输出，选出下一个词接在后面，直到 `<eos>`
或达到 `max_len`。

- 贪心解码 `greedy_decode`：每一步取概率最大的词（`argmax`）。一批句子一起解码：某一行生成 `<eos>` 之后，
  它后面的位置填 `<pad>`；所有行都结束（或到 `max_len`）就停。别忘了每一步都要传因果掩码
  `subsequent_mask(ys.size(1))`。
- 束搜索 `beam_search`（一个句子）：每一步保留得分最高的 `beam_size` 个前缀，得分是各步
  **对数概率之和**（`log_softmax` 后相加，不是概率相乘：连乘很快下溢成 0）。以 `<eos>` 结尾的前缀放进
  “已完成”列表，不再扩展；最后返回已完成的里得分最高的一个（一个都没完成时返回还在束里最好的）。
  贪心只看眼前一步，会错过“先走一步次优、后面好得多”的句子；`beam_size=1` 时束搜索就是贪心。

English: in training the decoder sees the whole target at once; when generating there is no target,
so the output comes one token at a time: start from `<bos>`, feed what has been generated to
`model.decode`, take the last position's output, append the chosen token, until `<eos>` or
`max_len`.

- `greedy_decode`: take the most likely token each step (`argmax`). A batch decodes together: once
  a row has produced `<eos>` its later positions are `<pad>`; stop when every row has ended (or at
  `max_len`). Pass the causal mask `subsequent_mask(ys.size(1))` at every step.
- `beam_search` (one sentence): keep the `beam_size` best prefixes each step, scored by the **sum of
  log-probabilities** (`log_softmax`, then add; multiplying probabilities underflows to 0). A prefix
  that ends in `<eos>` goes to a finished list and is not extended; return the best finished one
  (the best one still in the beam if none finished). Greedy looks one step ahead and misses the
  sentence that starts with a second-best token and is far better after; with `beam_size=1` beam
  search is greedy.

Interface: `model.encode(src, src_mask) -> memory`, `model.decode(memory, src_mask, ys, tgt_mask)
-> logits (B, T, V)` (step 9's `Transformer` has exactly these). `greedy_decode` returns `(B, L)`
ids starting with `<bos>`, L <= max_len; `beam_search` a 1-D tensor of ids starting with `<bos>`.

评分 · Graded by: `python exercises/_grade.py exercises/10_decoding.py`: greedy decoding with a
perfect copier (3 sources of lengths 4, 2, 3 must come back as `<bos>` + source + `<eos>`, `<pad>`
after), and a table model whose next token depends on the last one (after `<bos>`: A 0.5, B 0.4;
after A: A 0.4, B 0.3, `<eos>` 0.3; after B: `<eos>` 0.9): greedy gives `<bos> A A A A`, beam search
with beam 2 must find `<bos> B <eos>` (0.36), with beam 1 it must equal greedy.
参考答案 · Solution: `exercises/solutions/10_decoding.py`.
"""
import torch


def subsequent_mask(size):
    """已给出（第 2 步）· Given: step 2's solution."""
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))  # (1, T, T)


@torch.no_grad()
def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id=0):
    model.eval()
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long)  # (B, 1)
    raise NotImplementedError('TODO 10a: 循环：logits = model.decode(memory, src_mask, ys, subsequent_mask(ys.size(1)))，取 logits[:, -1].argmax(-1)，已结束的行填 pad_id，接到 ys 后面，全部结束就停 · loop: decode, argmax of the last position, pad_id for rows that already ended, append, stop when every row has produced eos_id or ys reaches max_len')


@torch.no_grad()
def beam_search(model, src, src_mask, max_len, bos_id, eos_id, beam_size=4):
    model.eval()
    memory = model.encode(src, src_mask)  # (1, S, d_model): one sentence
    beams = [(0.0, [bos_id])]  # (sum of log-probabilities, tokens)
    finished = []
    raise NotImplementedError('TODO 10b: 每一步把每个前缀扩展成它最好的 beam_size 个后继（得分 + log_softmax），全部候选里留最好的 beam_size 个；以 eos_id 结尾的放进 finished；最后返回 finished（或 beams）里得分最高的 · extend each prefix by its beam_size best next tokens (score + log_softmax), keep the beam_size best candidates, move those ending in eos_id to finished, return the best finished (else the best beam) as a tensor')
