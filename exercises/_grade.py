"""评分：第 2、9、10、11 步 | The grader of steps 2, 9, 10 and 11.

    python exercises/_grade.py exercises/09_transformer.py      # or 02_masks, 10_decoding, 11_training

中文：第 1–8 步的零件由 `scratchformer check` 和参考实现逐个比较；第 9–11 步是整个模型、解码和训练循环，
没有一个“参考零件”可比，于是由这里的小任务评分：一个很小的复制任务（源句子 `a b c d`，目标
`<bos> a b c d <eos>`），固定的随机种子，每一项都写明期望的结果。第 2 步的填充掩码也在这里按精确的值评分。

English: the parts of steps 1-8 are compared one by one with the reference by `scratchformer check`;
steps 9-11 are a whole model, decoding and a training loop, with no reference part to compare
against, so they are graded here on small tasks: a tiny copy task (source `a b c d`, target
`<bos> a b c d <eos>`) with fixed seeds, each check stating the result it expects. Step 2's padding
mask is graded here by its exact values too.

Exit status: 0 every check passed, 1 a check failed (or a TODO is still there), 2 the file could not
be loaded (an exception, an `exit()` at import, a loop past the time limit, a process or thread left
running, a replaced torch function). The command line grades in a child process through the same
machinery as `scratchformer check` (`scratchformer.check.sandbox` and `.guard`: one grader, not two):
nothing the learner's file starts outlives the grading, and the grader's reference computes with
torch's own functions. `grade_file` grades in this process (the tests call it on trusted solutions). The reference pieces here (the copy-task model on `torch.nn.Transformer`, the training
loop, greedy decoding) are the grader's own: your step 9 is trained by the grader's loop, your
step 11 trains the grader's model, so one step's bug never hides in another's.
"""
from __future__ import annotations

import importlib.util
import math
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

PAD, BOS, EOS = 0, 1, 2
N_SYMBOLS = 8
VOCAB = 3 + N_SYMBOLS  # ids 3..10 are the symbols
MIN_LEN, MAX_LEN = 3, 6


# ---------------------------------------------------------------- the copy task
def copy_batch(g: torch.Generator, batch_size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """src `(B, S)` and tgt `(B, S + 2)` = `<bos> src <eos>`, right-padded with `<pad>` = 0."""
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (batch_size,), generator=g)
    S = int(lengths.max())
    src = torch.full((batch_size, S), PAD)
    tgt = torch.full((batch_size, S + 2), PAD)
    for i, n in enumerate(lengths.tolist()):
        seq = torch.randint(3, VOCAB, (n,), generator=g)
        src[i, :n] = seq
        tgt[i, 0], tgt[i, 1:n + 1], tgt[i, n + 1] = BOS, seq, EOS
    return src, tgt


def pad_mask(seq: torch.Tensor) -> torch.Tensor:
    return (seq != PAD)[:, None, None, :]  # (B, 1, 1, S), True = real token


def causal(size: int) -> torch.Tensor:
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))  # (1, T, T)


def tgt_mask(tgt: torch.Tensor) -> torch.Tensor:
    return pad_mask(tgt) & causal(tgt.size(1))  # (B, 1, T, T)


def noam(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def reference_train(model: nn.Module, steps: int, d_model: int, seed: int = 0, warmup: int = 100) -> list[float]:
    """The grader's loop: Adam (0.9, 0.98), the Noam schedule, cross-entropy without the padding."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: noam(s + 1, d_model, warmup))
    model.train()
    losses = []
    for _ in range(steps):
        src, tgt = copy_batch(g)
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        logits = model(src, tgt_in, pad_mask(src), tgt_mask(tgt_in))  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def reference_greedy(model: nn.Module, src: torch.Tensor, max_len: int) -> torch.Tensor:
    """`(B, <= max_len)`: `<bos>` then the argmax token, `<pad>` after each row's `<eos>`."""
    model.eval()
    memory = model.encode(src, pad_mask(src))
    ys = torch.full((src.size(0), 1), BOS)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    while ys.size(1) < max_len and not bool(done.all()):
        logits = model.decode(memory, pad_mask(src), ys, causal(ys.size(1)))
        nxt = logits[:, -1].argmax(-1).masked_fill(done, PAD)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == EOS
    return ys


def exact_copies(model: nn.Module, n: int = 64, seed: int = 1) -> int:
    """How many of n new sources greedy decoding copies exactly (the `<eos>` included)."""
    src, tgt = copy_batch(torch.Generator().manual_seed(seed), n)
    out = reference_greedy(model, src, tgt.size(1))
    out = F.pad(out, (0, tgt.size(1) - out.size(1)), value=PAD)
    return int((out == tgt).all(dim=1).sum())


class CopyModel(nn.Module):
    """The grader's own copy-task model, on `torch.nn.Transformer` (the trusted implementation),
    with the exercises' interface and masks (True = may attend; torch's are True = blocked)."""

    def __init__(self, d_model: int = 32, n_heads: int = 4, d_ff: int = 64, n_layers: int = 1, dropout: float = 0.0):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(VOCAB, d_model)
        self.tgt_embed = nn.Embedding(VOCAB, d_model)
        position = torch.arange(32)[:, None] * torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        self.register_buffer("pos", torch.stack([position.sin(), position.cos()], -1).flatten(1)[None])  # (1, 32, d_model)
        self.core = nn.Transformer(d_model, n_heads, n_layers, n_layers, d_ff, dropout, batch_first=True)
        self.core.encoder.use_nested_tensor = False  # the same path in train and eval (and no prototype warning)
        self.generator = nn.Linear(d_model, VOCAB)
        for p in self.parameters():  # Glorot, as The Annotated Transformer
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def _embed(self, emb: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return emb(ids) * math.sqrt(self.d_model) + self.pos[:, : ids.size(1)]

    def encode(self, src, src_mask):
        return self.core.encoder(self._embed(self.src_embed, src), src_key_padding_mask=~src_mask[:, 0, 0])

    def decode(self, memory, src_mask, tgt, tgt_mask):
        causal_part = ~tgt_mask.reshape(-1, *tgt_mask.shape[-2:])[0]  # (T, T), True = blocked
        x = self.core.decoder(self._embed(self.tgt_embed, tgt), memory, tgt_mask=causal_part,
                              memory_key_padding_mask=~src_mask[:, 0, 0])
        return self.generator(x)  # (B, T, V)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)


# ---------------------------------------------------------------- the report
@dataclass
class Grade:
    step: str
    results: list[tuple[bool, str]] = field(default_factory=list)
    error: str | None = None  # the file could not be loaded

    def check(self, ok: bool, what: str) -> bool:
        self.results.append((bool(ok), what))
        return bool(ok)

    @property
    def exit_code(self) -> int:
        if self.error is not None:
            return 2
        return 0 if self.results and all(ok for ok, _ in self.results) else 1

    def text(self) -> str:
        if self.error is not None:
            return f"{self.step}: could not be graded · 无法评分: {self.error}"
        lines = [f"  {'ok  ' if ok else 'FAIL'}  {what}" for ok, what in self.results]
        verdict = "passed · 通过" if self.exit_code == 0 else "not yet · 还没通过"
        return "\n".join([f"{self.step}: {verdict}", *lines])


def _where(exc: BaseException, path: Path) -> str:
    """The learner's own line where `exc` was raised (never the grader's)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path.resolve()]
    return f" ({path.name}, line {frames[-1].lineno})" if frames else ""


def _attempt(grade: Grade, path: Path, what: str, fn) -> object | None:
    """Run one graded call; a TODO or an exception in the learner's code is a failed check with
    one line that says what to do (their file and line), never a traceback."""
    try:
        return fn()
    except NotImplementedError as e:
        grade.check(False, f"{what}: {e}{_where(e, path)}")
    except Exception as e:  # their code: report it, in one line, where it happened
        grade.check(False, f"{what}: {type(e).__name__}: {e}{_where(e, path)}")
    return None


def load(path: Path):
    """Import the learner's file (an `exit()` at import raises SystemExit: `grade_file` says so)."""
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass in the learner's file looks its module up there
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the steps
def grade_masks(m, grade: Grade, path: Path) -> None:
    seq = torch.tensor([[5, 6, 7, 0], [5, 0, 0, 0]])
    want_pad = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    got = _attempt(grade, path, "padding_mask", lambda: m.padding_mask(seq, 0))
    if got is not None:
        grade.check(tuple(got.shape) == (2, 1, 1, 4) and torch.equal(got.bool(), want_pad),
                    f"padding_mask([[5, 6, 7, 0], [5, 0, 0, 0]]) is (2, 1, 1, 4), 1 = real token (got shape {tuple(got.shape)})")
    got = _attempt(grade, path, "subsequent_mask", lambda: m.subsequent_mask(4))
    if got is not None:
        grade.check(tuple(got.shape) == (1, 4, 4) and torch.equal(got.bool(), causal(4)),
                    "subsequent_mask(4) is (1, 4, 4), True on and below the diagonal "
                    f"(got {got.int().tolist() if got.numel() == 16 else tuple(got.shape)})")
    got = _attempt(grade, path, "target_mask", lambda: m.target_mask(seq, 0))
    if got is not None:
        grade.check(tuple(got.shape) == (2, 1, 4, 4) and torch.equal(got.bool(), want_pad & causal(4)),
                    f"target_mask is padding_mask & subsequent_mask, (2, 1, 4, 4) (got shape {tuple(got.shape)})")


def grade_transformer(m, grade: Grade, path: Path, steps: int = 300, need: int = 48) -> None:
    torch.manual_seed(0)
    model = _attempt(grade, path, "Transformer(...)", lambda: m.Transformer(
        VOCAB, VOCAB, d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.0, max_len=32))
    if model is None:
        return
    model.eval()
    g = torch.Generator().manual_seed(2)
    src, tgt = copy_batch(g, 4)
    with torch.no_grad():
        logits = _attempt(grade, path, "forward", lambda: model(src, tgt, pad_mask(src), tgt_mask(tgt)))
        if logits is None:
            return
        if not grade.check(tuple(logits.shape) == (4, tgt.size(1), VOCAB),
                           f"forward returns logits (B, T, tgt_vocab) = (4, {tgt.size(1)}, {VOCAB}) (got {tuple(logits.shape)})"):
            return
        t = 2
        changed = tgt.clone()
        changed[:, t:] = torch.randint(3, VOCAB, changed[:, t:].shape, generator=g)
        later = model(src, changed, pad_mask(src), tgt_mask(tgt))
        grade.check(torch.allclose(logits[:, :t], later[:, :t], atol=1e-5),
                    f"no position reads a later target token (tgt[:, {t}:] changed, logits before {t} the same) "
                    "· 解码器不能偷看后面的词：检查 tgt_mask")
        padded = F.pad(src, (0, 3), value=PAD)
        more = model(padded, tgt, pad_mask(padded), tgt_mask(tgt))
        grade.check(torch.allclose(logits, more, atol=1e-5),
                    "source padding is ignored (3 more <pad>, same logits) · 填充位置不能被注意：检查 src_mask")
    if grade.exit_code != 0:
        return  # a model that reads the future or the padding: training it would only hide that
    losses = _attempt(grade, path, "training on the copy task", lambda: reference_train(model, steps, 32))
    if losses is None:
        return
    copied = exact_copies(model)
    grade.check(copied >= need and all(math.isfinite(v) for v in losses),
                f"trained {steps} steps on the copy task (loss {losses[0]:.2f} -> {sum(losses[-20:]) / 20:.2f}), greedy "
                f"decoding copies {copied}/64 new sources exactly (need {need}) · 复制任务：训练后贪心解码要抄对 {need}/64")


class TableModel(nn.Module):
    """A stand-in for a trained model: the next token's probabilities depend only on the last
    token (a fixed table), so greedy and beam search have exact answers. After `<bos>`: A 0.5,
    B 0.4, `<eos>` 0.1; after A: A 0.4, B 0.3, `<eos>` 0.3; after B: `<eos>` 0.9, A 0.05, B 0.05.
    Greedy follows A A A ... (never `<eos>`), beam search finds `<bos> B <eos>` (0.36)."""
    A, B = 3, 4

    def __init__(self):
        super().__init__()
        probs = torch.full((VOCAB, VOCAB), 1e-6)
        probs[BOS, [self.A, self.B, EOS]] = torch.tensor([0.5, 0.4, 0.1])
        probs[self.A, [self.A, self.B, EOS]] = torch.tensor([0.4, 0.3, 0.3])
        probs[self.B, [self.A, self.B, EOS]] = torch.tensor([0.05, 0.05, 0.9])
        probs[EOS, EOS] = 1.0
        self.register_buffer("logp", (probs / probs.sum(-1, keepdim=True)).log())

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.logp[tgt]  # (B, T, V): log-probabilities are logits too


class OracleCopyModel(nn.Module):
    """A perfect copier: at step t it puts most of the mass on src[t], then on `<eos>`."""

    def encode(self, src, src_mask):
        return src

    def decode(self, memory, src_mask, tgt, tgt_mask):
        T = tgt.size(1)
        lengths = (memory != PAD).sum(1)
        nxt = torch.where(torch.arange(T)[None, :] < lengths[:, None],
                          F.pad(memory, (0, max(0, T - memory.size(1))), value=PAD)[:, :T], EOS)  # (B, T)
        return F.one_hot(nxt, VOCAB).float() * 5.0  # (B, T, V)


def grade_decoding(m, grade: Grade, path: Path) -> None:
    src = torch.tensor([[5, 6, 7, 8], [9, 3, 0, 0], [4, 4, 4, 0]])
    want = torch.tensor([[BOS, 5, 6, 7, 8, EOS], [BOS, 9, 3, EOS, PAD, PAD], [BOS, 4, 4, 4, EOS, PAD]])
    got = _attempt(grade, path, "greedy_decode on a perfect copier",
                   lambda: m.greedy_decode(OracleCopyModel(), src, pad_mask(src), 8, BOS, EOS, PAD))
    if got is not None:
        grade.check(torch.equal(got, want),
                    "greedy_decode copies 3 sources of lengths 4, 2, 3: <bos> + source + <eos>, <pad> after <eos>, "
                    f"stops when every row has ended (want {want.tolist()}, got {got.tolist()})")
    one = torch.tensor([[5]])
    A, B = TableModel.A, TableModel.B
    got = _attempt(grade, path, "greedy_decode on the table model",
                   lambda: m.greedy_decode(TableModel(), one, pad_mask(one), 5, BOS, EOS, PAD))
    if got is not None:
        grade.check(torch.equal(got, torch.tensor([[BOS, A, A, A, A]])),
                    f"greedy_decode takes the most likely token each step: [<bos> A A A A] at max_len 5 (got {got.tolist()})")
    got = _attempt(grade, path, "beam_search on the table model",
                   lambda: m.beam_search(TableModel(), one, pad_mask(one), 5, BOS, EOS, beam_size=2))
    if got is not None:
        grade.check(torch.equal(torch.as_tensor(got).flatten(), torch.tensor([BOS, B, EOS])),
                    "beam_search (beam 2) finds [<bos> B <eos>] (probability 0.4 x 0.9 = 0.36), which greedy misses "
                    f"(got {torch.as_tensor(got).tolist()})")
    got = _attempt(grade, path, "beam_search with beam 1",
                   lambda: m.beam_search(TableModel(), one, pad_mask(one), 5, BOS, EOS, beam_size=1))
    if got is not None:
        grade.check(torch.equal(torch.as_tensor(got).flatten(), torch.tensor([BOS, A, A, A, A])),
                    f"beam_search with beam 1 is greedy: [<bos> A A A A] (got {torch.as_tensor(got).tolist()})")
    got = _attempt(grade, path, "beam_search on a perfect copier",
                   lambda: m.beam_search(OracleCopyModel(), src[:1], pad_mask(src[:1]), 8, BOS, EOS, beam_size=3))
    if got is not None:
        grade.check(torch.equal(torch.as_tensor(got).flatten(), want[0]),
                    f"beam_search (beam 3) copies [5 6 7 8] (got {torch.as_tensor(got).tolist()})")


def grade_training(m, grade: Grade, path: Path, steps: int = 300, below: float = 0.3) -> None:
    d_model, warmup = 32, 100
    rates = _attempt(grade, path, "noam_lr", lambda: [m.noam_lr(s, d_model, warmup) for s in (1, 50, 100, 400)])
    if rates is not None:
        want = [noam(s, d_model, warmup) for s in (1, 50, 100, 400)]
        grade.check(all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(rates, want)),
                    "noam_lr(step, 32, 100) = 32^-0.5 · min(step^-0.5, step · 100^-1.5) at steps 1, 50, 100, 400: "
                    f"{', '.join(f'{w:.6f}' for w in want)} (got {', '.join(f'{r:.6f}' for r in rates)})")
    torch.manual_seed(0)
    model = CopyModel()
    made = _attempt(grade, path, "make_optimizer", lambda: m.make_optimizer(model, d_model, warmup, factor=1.0))
    if made is None:
        return
    opt, sched = made
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients yet: only the schedule moves
        sched.step()
    want = [noam(s, d_model, warmup, 1.0) for s in (1, 2, 3)]
    grade.check(all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(lrs, want)),
                f"optimizer step n uses noam_lr(n): {', '.join(f'{w:.6f}' for w in want)} at steps 1-3 "
                f"(got {', '.join(f'{v:.6f}' for v in lrs)}) · 第 n 步的学习率是 noam_lr(n)（LambdaLR 从 0 数起）")
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(2, 5, VOCAB, generator=g)
    target = torch.tensor([[5, 6, 7, EOS, PAD], [8, EOS, PAD, PAD, PAD]])
    got = _attempt(grade, path, "loss_fn", lambda: m.loss_fn(logits, target, PAD, 0.1))
    if got is not None:
        want = F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=PAD, label_smoothing=0.1)
        grade.check(torch.allclose(torch.as_tensor(got), want, atol=1e-6),
                    f"loss_fn: cross-entropy with label smoothing 0.1, <pad> ignored, mean over real tokens: "
                    f"{want.item():.6f} (got {float(got):.6f})")
    opt, sched = m.make_optimizer(model, d_model, warmup, factor=1.0)
    data = torch.Generator().manual_seed(0)
    batches = [copy_batch(data) for _ in range(steps)]
    mean_loss = _attempt(grade, path, "train_epoch", lambda: m.train_epoch(model, batches, opt, sched, PAD))
    if mean_loss is None:
        return
    with torch.no_grad():
        model.eval()
        src, tgt = copy_batch(torch.Generator().manual_seed(1), 64)
        logits = model(src, tgt[:, :-1], pad_mask(src), tgt_mask(tgt[:, :-1]))
        after = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD).item()
    copied = exact_copies(model)
    grade.check(after < below and math.isfinite(float(mean_loss)),
                f"train_epoch: {steps} batches train the grader's model to a held-out loss of {after:.3f} "
                f"(need < {below}; the epoch's mean loss {float(mean_loss):.3f}); greedy copies {copied}/64")


STEPS = {"02": grade_masks, "09": grade_transformer, "10": grade_decoding, "11": grade_training}


def grade_file(path: str | Path) -> Grade:
    path = Path(path)
    step = path.name[:2]
    grade = Grade(path.name)
    if step not in STEPS:
        grade.error = (f"this grader grades steps {', '.join(STEPS)}; grade {path.name} with "
                       f"`scratchformer check {path}`")
        return grade
    if not path.is_file():
        grade.error = f"{path} is not a file"
        return grade
    try:
        module = load(path)
    except SystemExit as e:  # an unguarded `sys.exit(main())`: it would end the grading with their code
        grade.error = (f"your file called exit({e.code!r}) while being loaded{_where(e, path)}; the grader imports it: "
                       f"put script code under `if __name__ == \"__main__\":`")
        return grade
    except Exception as e:
        grade.error = f"importing it raised {type(e).__name__}: {e}{_where(e, path)}"
        return grade
    STEPS[step](module, grade, path)
    return grade


TIMEOUT_S = 600.0  # step 9 trains 300 steps: a minute or two on a busy core


def grade_in_child(path: str | Path, timeout_s: float = TIMEOUT_S) -> Grade:
    """`grade_file` in a child process under `scratchformer check`'s supervisor and torch guard."""
    import json
    import os
    import tempfile

    from scratchformer.check.child import stopped_line
    from scratchformer.check.sandbox import run_untrusted

    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="scratchformer-grade-") as tmp:
        out, ready = Path(tmp) / "grade.json", Path(tmp) / "ready"
        env = dict(os.environ)
        src = str(Path(sys.modules["scratchformer"].__file__).resolve().parents[1])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        outcome = run_untrusted([sys.executable, str(Path(__file__).resolve()), "--child", str(path.resolve()),
                                 str(out), str(ready)], timeout_s=timeout_s, ready=ready, env=env,
                                cwd=str(path.resolve().parent) if path.parent.is_dir() else None)
        why = stopped_line(outcome, "en", timeout_s)
        if out.exists() and not outcome.stopped and not outcome.flooded:
            d = json.loads(out.read_text(encoding="utf-8"))
            grade = Grade(d["step"], [tuple(r) for r in d["results"]], d["error"])
            if why and grade.error is None:
                grade.error = why
            return grade
        grade = Grade(path.name)
        tail = [ln for ln in outcome.output.strip().splitlines() if ln.strip()][-1:]
        grade.error = why or f"the grading process exited ({outcome.rc}): {tail[0][:200] if tail else 'an os._exit, or a crash'}"
        return grade


def _child(path: str, out: str, ready: str) -> None:
    """The child's side: limits, the guard, the grading, the result as JSON; then leave at once."""
    import json
    import os

    from scratchformer.check.guard import TorchGuard
    from scratchformer.check.sandbox import leave, limit_self, threads_left
    from scratchformer.fileio import atomic_write_text

    pid = os.getpid()
    torch.set_num_threads(1)  # tiny models: one thread is as fast, and fair to a shared machine
    guard = TorchGuard()
    limit_self(4096)
    Path(ready).touch()
    grade = grade_file(path)
    if os.getpid() != pid:  # a copy their os.fork() made
        leave()
    replaced = guard.replaced()
    if replaced and grade.error is None:
        grade.error = (f"your file replaces {', '.join(replaced[:3])}: the grader computes with torch's own "
                       f"functions; give your function its own name")
    left = threads_left()
    if left and grade.error is None:
        grade.error = f"your code left a thread running ({left[0]}): make it daemon=True, or join it before returning"
    atomic_write_text(out, json.dumps({"step": grade.step, "results": grade.results, "error": grade.error}))
    leave()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 4 and argv[0] == "--child":
        _child(*argv[1:])
    if len(argv) != 1:
        print("usage: python exercises/_grade.py exercises/NN_name.py   (steps 02, 09, 10, 11)")
        return 2
    try:
        import scratchformer  # noqa: F401  (the child machinery lives there)
    except ImportError:
        print("scratchformer is not importable from this Python: run `.venv/bin/python exercises/_grade.py ...` "
              "(or `. .venv/bin/activate` first)")
        return 2
    grade = grade_in_child(argv[0])
    print(grade.text())
    return grade.exit_code


if __name__ == "__main__":
    torch.set_num_threads(1)  # tiny models: one thread is as fast, and fair to a shared machine
    sys.exit(main())
