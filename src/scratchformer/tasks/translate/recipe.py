"""The translation recipe: every setting of a `train translate` run (saved as config.json)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import JsonConfig, check_count
from ...errors import UserError
from ...models.seq2seq import Seq2SeqConfig
from ...train import TrainConfig
from ..runs import Recipe, check_batching, check_ensemble, check_tokenizer
from .decoding import DecodeConfig

SRC_TOK, TGT_TOK, FINAL, AVERAGED, SNAPSHOTS = (
    "src_tokenizer.json", "tgt_tokenizer.json", "final.json", "averaged.safetensors", "snapshots")


@dataclass
class TranslateDataConfig(JsonConfig):
    dataset: str = "hsk-zh-en"  # registered name, a src<TAB>tgt file, or "train.src,train.tgt"
    dataset_options: dict = field(default_factory=dict)  # e.g. {"reverse": true}
    valid_file: str | None = None  # same forms as a user's dataset
    test_file: str | None = None
    src_tokenizer: str = "auto"  # char | word | bpe | wordpiece | auto (char for CJK, else bpe)
    tgt_tokenizer: str = "auto"
    src_vocab_size: int = 8000  # bpe / wordpiece
    tgt_vocab_size: int = 8000
    joint_vocab: bool = False  # one tokenizer trained on both sides (needed to share embeddings)
    min_freq: int = 1  # char / word
    max_len: int = 128  # training pairs with a longer side (in tokens) are left out
    max_tokens: int | None = 4096  # padded tokens per batch (the longer side counts)
    batch_size: int | None = None
    label_smoothing: float = 0.1
    bleu_sentences: int = 500  # validation sentences greedy-decoded for BLEU at each evaluation (0 = all)

    def __post_init__(self) -> None:
        if self.max_tokens is None and self.batch_size is None:
            raise UserError("set data.max_tokens or data.batch_size")
        check_batching(self.batch_size, self.max_tokens)
        check_tokenizer("data.src_tokenizer", self.src_tokenizer)
        check_tokenizer("data.tgt_tokenizer", self.tgt_tokenizer)
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.max_len < 2:
            raise UserError("data.max_len must be at least 2")
        for knob in ("src_vocab_size", "tgt_vocab_size", "min_freq"):
            check_count(f"data.{knob}", getattr(self, knob))
        check_count("data.bleu_sentences", self.bleu_sentences, least=0, hint=" (0: all)")


@dataclass
class TranslateRecipe(Recipe):
    """Everything a translation run needs; saved as the run's config.json."""

    task: str = "translate"
    data: TranslateDataConfig = field(default_factory=TranslateDataConfig)
    model: Seq2SeqConfig = field(default_factory=Seq2SeqConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        epochs=40, lr=1e-3, schedule="noam", warmup_steps=400, metric="bleu", metric_mode="max",
        weight_decay=0.0001, betas=(0.9, 0.98)))
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # used for test and by default in `translate`
    # checkpoint averaging: snapshots of the weights at the last N optimizer steps that are a
    # multiple of `average_every` before the end (<= 1: off); None = 1% of the run's steps
    # (at least 1); a run bounded only by max_minutes snapshots every `average_every` (default
    # 50) steps throughout and keeps the last N
    average_last: int = 5
    average_every: int | None = None
    # >1: train members with seeds seed, seed+1, ... into member<i>/ and decode with all of them
    # together (next-token probabilities averaged at every step)
    ensemble: int = 1

    def __post_init__(self) -> None:
        check_ensemble(self.ensemble)
        if self.average_every is not None and (isinstance(self.average_every, bool)
                                               or not isinstance(self.average_every, int) or self.average_every < 1):
            raise UserError(f"average_every must be a whole number of steps >= 1 (or null: 1% of the run), "
                            f"got {self.average_every!r}")
