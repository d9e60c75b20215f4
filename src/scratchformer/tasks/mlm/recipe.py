"""The MLM pretraining recipe: every setting of a `pretrain mlm` run (saved as config.json)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import JsonConfig, check_count
from ...errors import UserError
from ...models.mlm import MLMConfig
from ...train import TrainConfig
from ..runs import Recipe, check_batching, check_tokenizer


@dataclass
class MLMDataConfig(JsonConfig):
    datasets: list = field(default_factory=lambda: ["inews", "thucnews"])
    dataset_options: dict = field(default_factory=dict)  # per data set: {"inews": {"fields": "content"}}
    tokenizer: str = "char"  # char | word | bpe | wordpiece
    vocab_size: int = 8000  # bpe / wordpiece
    min_freq: int = 2  # char / word: rarer tokens become <unk>
    lowercase: bool = False
    max_len: int = 128  # tokens per window
    batch_size: int = 64
    max_tokens: int | None = None  # token budget per batch instead of batch_size
    mask_prob: float = 0.15
    span: int = 1  # masked runs: 1 = single tokens (BERT), 2 = whole bigrams (Chinese words)
    valid_frac: float = 0.02  # documents held out for the masked-token accuracy
    valid_max_windows: int = 2000

    def __post_init__(self) -> None:
        if isinstance(self.datasets, str):
            self.datasets = [d for d in self.datasets.split(",") if d.strip()]
        if not self.datasets:
            raise UserError("pretrain mlm needs text: give --data DATASET_OR_FILE (repeatable)")
        if not 0.0 < self.mask_prob < 1.0:
            raise UserError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        check_batching(self.batch_size, self.max_tokens)
        check_tokenizer("data.tokenizer", self.tokenizer, auto=False)
        if self.span < 1 or self.max_len < 2:
            raise UserError("span must be >= 1 and max_len >= 2")
        check_count("data.vocab_size", self.vocab_size)
        check_count("data.min_freq", self.min_freq)
        check_count("data.valid_max_windows", self.valid_max_windows)
        if not 0.0 <= self.valid_frac < 0.5:
            raise UserError(f"valid_frac must be in [0, 0.5), got {self.valid_frac}")


@dataclass
class MLMRecipe(Recipe):
    task: str = "mlm"
    data: MLMDataConfig = field(default_factory=MLMDataConfig)
    model: MLMConfig = field(default_factory=MLMConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        lr=1e-3, warmup_steps=500, max_minutes=20, epochs=20, metric="accuracy", metric_mode="max",
        eval_every=500))
