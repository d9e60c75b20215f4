"""The Trainer's view of translation (docs/contracts.md): label-smoothed loss, validation BLEU
(sacrebleu), weight snapshots and checkpoint averaging."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ...data.tokenizers import PAD_ID, Tokenizer, cjk_fraction
from ...errors import UserError
from ...fileio import remove
from ...models.seq2seq import Seq2Seq
from ...train.checkpoint import load_weights, save_weights
from ..runs import RunDir
from .data import TranslateBatch
from .decoding import greedy_decode
from .recipe import SRC_TOK, TGT_TOK, TranslateRecipe


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """sacrebleu corpus BLEU and chrF with their signatures. The BLEU tokenizer is 13a, or
    'zh' when the references are mostly Chinese."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu = BLEU(tokenize="zh" if cjk_fraction(refs[:200]) > 0.3 else "13a")
    chrf = CHRF()
    b, c = bleu.corpus_score(list(hyps), [list(refs)]), chrf.corpus_score(list(hyps), [list(refs)])
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_detail": str(b)}


SENTENCE_SORTS = ("input", "bleu", "chrf")


def sentence_scores(srcs: Sequence[str], hyps: Sequence[str], refs: Sequence[str],
                    sort: str = "input") -> dict[str, Any]:
    """Each sentence's source, reference, hypothesis, sacrebleu sentence BLEU and chrF, in input
    order or worst first (`sort` = "bleu" / "chrf"; ties keep input order). Sentence BLEU is
    sacrebleu's `sentence_score`: exponential smoothing (Chen & Cherry 2014 method 3: each
    n-gram order with no match counts 1 / 2^k matches) and effective order, so a short sentence
    without 4-gram matches does not score 0; on a handful of words it is noisy (d2l's table of
    four sentences is; corpus BLEU is the measure of a system). The tokenizer is the corpus one's."""
    from sacrebleu.metrics import BLEU, CHRF

    if sort not in SENTENCE_SORTS:
        raise UserError(f"--sort {sort!r}: choose one of {', '.join(SENTENCE_SORTS)}")
    if not len(srcs) == len(hyps) == len(refs):
        raise ValueError(f"{len(srcs)} sources, {len(hyps)} hypotheses, {len(refs)} references")
    bleu = BLEU(tokenize="zh" if cjk_fraction(list(refs)[:200]) > 0.3 else "13a", effective_order=True)
    chrf = CHRF()
    rows = [{"i": i + 1, "source": s, "reference": r, "hypothesis": h,
             "bleu": bleu.sentence_score(h, [r]).score, "chrf": chrf.sentence_score(h, [r]).score}
            for i, (s, h, r) in enumerate(zip(srcs, hyps, refs))]
    if sort != "input":
        rows.sort(key=lambda row: row[sort])  # stable: ties in input order
    return {"sentences": rows, "sentence_bleu_signature": str(bleu.get_signature()),
            "sentence_chrf_signature": str(chrf.get_signature()), "sorted_by": sort}


class TranslationTask:
    """The Trainer's view of translation (see docs/contracts.md)."""

    def __init__(self, model: Seq2Seq, recipe: TranslateRecipe, src_tok: Tokenizer, tgt_tok: Tokenizer,
                 given: TranslateRecipe | None = None):
        self.model, self.recipe, self.src_tok, self.tgt_tok = model, recipe, src_tok, tgt_tok
        self.given = given  # the recipe as the user gave it (recipe.json), if known
        self.valid_refs: list[str] | None = None  # references by index, for validation BLEU
        self.snapshot_dir: Path | None = None  # where evaluate() keeps weights for averaging
        self.current_step = lambda: 0  # set by train_translator to read the Trainer's step

    def count(self, b: TranslateBatch) -> int:
        return int((b.tgt_out != PAD_ID).sum())

    def batch_tokens(self, b: TranslateBatch) -> int:
        src_pad = getattr(self.src_tok, "pad_id", PAD_ID)
        return int((b.src != src_pad).sum()) + int((b.tgt_out != PAD_ID).sum())

    def loss_sum(self, b: TranslateBatch):
        logits = self.model(b.src, b.tgt_in).float()  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID,
                               reduction="sum", label_smoothing=self.recipe.data.label_smoothing)
        real = b.tgt_out != PAD_ID
        correct = ((logits.argmax(-1) == b.tgt_out) & real).sum()
        return loss, {"accuracy": float(correct)}

    def evaluate(self, batches) -> dict[str, float]:
        """Loss (plain NLL per target token, no smoothing) on every batch; greedy BLEU/chrF on
        the first `data.bleu_sentences` validation pairs."""
        nll, count = 0.0, 0
        limit = self.recipe.data.bleu_sentences or None
        hyps: dict[int, str] = {}
        greedy_cfg = self.recipe.decode.replace(beam=1)
        for b in batches:
            logits = self.model(b.src, b.tgt_in).float()
            nll += float(F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID,
                                         reduction="sum"))
            count += self.count(b)
            if self.valid_refs is not None:
                rows = [r for r, i in enumerate(b.idx.tolist()) if limit is None or i < limit]
                if rows:
                    sel = torch.tensor(rows, device=b.src.device)
                    for r, h in zip(rows, greedy_decode(self.model, b.src.index_select(0, sel), greedy_cfg)):
                        hyps[int(b.idx[r])] = self.tgt_tok.decode(h.tokens)
        loss = nll / max(count, 1)
        out = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        if hyps:
            order = sorted(hyps)
            scores = corpus_scores([hyps[i] for i in order], [self.valid_refs[i] for i in order])
            out.update(bleu=scores["bleu"], chrf=scores["chrf"])
        return out

    def average_every(self, total_steps: int | None) -> int:
        """Steps between two averaging snapshots: `average_every`, else 1% of the run."""
        if self.recipe.average_every is not None:
            return self.recipe.average_every
        return max(1, round(0.01 * total_steps)) if total_steps else UNBOUNDED_AVERAGE_EVERY

    def after_step(self, step: int, total_steps: int | None) -> None:
        """Snapshot the weights for averaging at the last `average_last` steps that are
        `average_every` apart and end at the run's last step: the average of closely spaced
        points near the end (Vaswani et al. average the last checkpoints, saved minutes apart),
        not of evaluations spread over the whole run. Without a known length the snapshots roll
        (every `average_every` steps, the last N kept)."""
        n = self.recipe.average_last
        if self.snapshot_dir is None or n <= 1:
            return
        every = self.average_every(total_steps)
        if self.recipe.train.max_minutes is not None:
            total_steps = None  # the time budget may end the run before the planned last step
        if total_steps:
            to_go = total_steps - step
            if to_go < 0 or to_go >= n * every or to_go % every:
                return
        elif step % every:
            return
        save_weights(self.model, self.snapshot_dir / f"step-{step:08d}.safetensors",
                     {"step": str(step), "every": str(every)})
        files = snapshot_files(self.snapshot_dir)
        for old in files[:-n] + [f for f in files if _step_of(f) > step]:  # stale: a run resumed from before it
            remove(old)

    def save(self, run_dir: Path) -> None:
        run = RunDir(run_dir)
        run.save_recipe(self.recipe, self.given)
        self.src_tok.save(run / SRC_TOK)
        self.tgt_tok.save(run / TGT_TOK)


UNBOUNDED_AVERAGE_EVERY = 50  # steps between snapshots when the run's length is not known


def snapshot_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("step-*.safetensors"))


def _step_of(path: Path) -> int:
    return int(path.stem.split("-", 1)[1])


def average_checkpoints(model: torch.nn.Module, paths: Sequence[Path]) -> torch.nn.Module:
    """Load the element-wise mean of the weights in `paths` into `model` (Vaswani et al.
    average the last 5-20 checkpoints: a cheap ensemble along the end of the trajectory)."""
    if not paths:
        raise UserError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        load_weights(model, p)
        for k, v in model.state_dict().items():
            total[k] = total.get(k, 0) + v.detach().double()
    model.load_state_dict({k: (v / len(paths)).to(model.state_dict()[k].dtype) for k, v in total.items()})
    return model
