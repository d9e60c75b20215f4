"""第 11 步 · 带预热的训练循环 | Step 11 · A training loop with warmup

中文：论文的学习率先线性升高（预热 warmup 步），再按步数的 -1/2 次方下降（“Noam” 调度）：

    lr(step) = factor · d_model^(-1/2) · min(step^(-1/2), step · warmup^(-3/2))      （step 从 1 数起）

为什么要预热：训练刚开始时 Adam 的二阶矩估计还不准，Post-LN 的梯度又很大，一上来就用大学习率会发散。
实现用 `torch.optim.Adam(lr=1.0, betas=(0.9, 0.98), eps=1e-9)` 加 `LambdaLR`，让乘子等于 `noam_lr`。
注意 `LambdaLR` 的步数从 0 数起：第 n 次 `optimizer.step()` 用的是 `lr_lambda(n - 1)`，
所以要写 `lambda s: noam_lr(s + 1, ...)`。

训练一步：`tgt_in = tgt[:, :-1]`（以 `<bos>` 开头）、`tgt_out = tgt[:, 1:]`（以 `<eos>` 结尾）——
目标右移一位，否则解码器的输入里就有它要预测的词；损失是交叉熵，`<pad>` 不计（`ignore_index`），
可以加标签平滑；然后 `zero_grad` → `backward` → `step` → `scheduler.step()`。

English: the paper's learning rate rises linearly for `warmup` steps, then falls as the inverse
square root of the step ("Noam", formula above; steps count from 1). Why warm up: at the start
Adam's second-moment estimates are poor and Post-LN's gradients are large, so a large rate at once
diverges. Build it as `torch.optim.Adam(lr=1.0, betas=(0.9, 0.98), eps=1e-9)` with a `LambdaLR`
whose multiplier is `noam_lr`. `LambdaLR` counts from 0: optimizer step n uses `lr_lambda(n - 1)`,
so write `lambda s: noam_lr(s + 1, ...)`.

One training step: `tgt_in = tgt[:, :-1]` (starts with `<bos>`), `tgt_out = tgt[:, 1:]` (ends
with `<eos>`): the target shifted by one, or the decoder's input holds the token it must predict;
the loss is cross-entropy without the `<pad>` positions (`ignore_index`), optionally with label
smoothing; then `zero_grad` -> `backward` -> `step` -> `scheduler.step()`.

Interface: `noam_lr(step, d_model, warmup, factor=1.0) -> float`;
`make_optimizer(model, d_model, warmup, factor=1.0) -> (optimizer, scheduler)`;
`loss_fn(logits (B, T, V), target (B, T), pad_id, smoothing=0.0) -> scalar tensor`;
`train_epoch(model, batches, optimizer, scheduler, pad_id, smoothing=0.0) -> mean loss (float)`,
`batches` a list of `(src (B, S), tgt (B, T + 1))`, the model step 9's `Transformer` interface.

评分 · Graded by: `python exercises/_grade.py exercises/11_training.py`: `noam_lr` at steps 1, 50,
100 and 400 (d_model 32, warmup 100) to 1e-6; the optimizer's rate at steps 1-3 equals `noam_lr(1..3)`;
`loss_fn` equals `F.cross_entropy(..., ignore_index=pad, label_smoothing=0.1)` to 1e-6; and
`train_epoch` trains the grader's copy-task model (on `torch.nn.Transformer`, seed 0) for 300
batches to a held-out loss below 0.3.
参考答案 · Solution: `exercises/solutions/11_training.py`.
"""
import torch
import torch.nn.functional as F


def padding_mask(seq, pad_idx=0):
    """已给出（第 2 步）· Given: step 2's solution."""
    return (seq != pad_idx).unsqueeze(1).unsqueeze(2)  # (B, 1, 1, S)


def target_mask(tgt, pad_idx=0):
    """已给出（第 2 步）· Given: step 2's solution."""
    causal = torch.tril(torch.ones(1, tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device))
    return padding_mask(tgt, pad_idx) & causal  # (B, 1, T, T)


def noam_lr(step, d_model, warmup, factor=1.0):
    # --- TODO 11a: step = max(step, 1)；返回 factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5) · the Noam schedule; guard step 0
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    # --- end TODO


def make_optimizer(model, d_model, warmup, factor=1.0):
    # --- TODO 11b: Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9) 和 LambdaLR(optimizer, lambda s: noam_lr(s + 1, ...)) · return (optimizer, scheduler); LambdaLR counts from 0, hence s + 1
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: noam_lr(s + 1, d_model, warmup, factor))
    return optimizer, scheduler
    # --- end TODO


def loss_fn(logits, target, pad_id, smoothing=0.0):
    # --- TODO 11c: 展平成 (B·T, V) 和 (B·T,)，F.cross_entropy(..., ignore_index=pad_id, label_smoothing=smoothing) · flatten, then cross-entropy that ignores pad_id
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1),
                           ignore_index=pad_id, label_smoothing=smoothing)
    # --- end TODO


def train_epoch(model, batches, optimizer, scheduler, pad_id, smoothing=0.0):
    model.train()
    total = 0.0
    # --- TODO 11d: 每个 (src, tgt)：tgt_in = tgt[:, :-1]，tgt_out = tgt[:, 1:]，logits = model(src, tgt_in, padding_mask(src), target_mask(tgt_in))，loss_fn，zero_grad、backward、step、scheduler.step() · shift the target, forward, loss, zero_grad, backward, step, scheduler.step(); return the mean loss
    for src, tgt in batches:
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # the target shifted right by <bos>
        logits = model(src, tgt_in, padding_mask(src, pad_id), target_mask(tgt_in, pad_id))  # (B, T, V)
        loss = loss_fn(logits, tgt_out, pad_id, smoothing)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        total += loss.item()
    return total / len(batches)
    # --- end TODO
