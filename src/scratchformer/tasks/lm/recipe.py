"""The language-model recipe: every setting of a `train lm` run (saved as config.json)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import JsonConfig, check_count
from ...errors import UserError
from ...models.language_model import LMConfig
from ...train import TrainConfig
from ..runs import Recipe

TOKENIZERS = ("char", "bpe")


@dataclass
class LMDataConfig(JsonConfig):
    dataset: str = "shakespeare"  # a registered corpus (shakespeare, sanguo) or a .txt path
    valid_file: str | None = None  # validation text; default: the last valid_frac of `dataset`
    valid_frac: float = 0.1
    tokenizer: str = "char"  # char | bpe
    vocab_size: int = 2000  # bpe
    min_freq: int = 1  # char: rarer characters become <unk>
    context: int = 64  # tokens the model sees (training window and default generation window)
    batch_size: int = 12
    random_length: bool = False  # random-length crops: each batch's windows get T ~ U{min_length..context}
    min_length: int = 1  # shortest random-length window (with random_length)
    eval_windows: int | None = 1000  # validation windows used during training (None = all)
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer must be one of {TOKENIZERS} for a language model, got {self.tokenizer!r}")
        if self.context < 1 or self.batch_size < 1 or self.eval_batch_size < 1:
            raise UserError("data.context, data.batch_size and data.eval_batch_size must be >= 1")
        if self.random_length and not 1 <= self.min_length <= self.context:
            raise UserError(f"data.min_length must be in 1..data.context={self.context} with data.random_length, "
                            f"got {self.min_length}")
        if self.eval_windows is not None and self.eval_windows < 1:
            raise UserError("data.eval_windows must be >= 1 (or null for all windows)")
        if not 0.0 < self.valid_frac < 1.0:
            raise UserError(f"data.valid_frac must be in (0, 1), got {self.valid_frac}")
        check_count("data.vocab_size", self.vocab_size)
        check_count("data.min_freq", self.min_freq)
        check_count("data.min_length", self.min_length)


def _lm_train() -> TrainConfig:
    # nanoGPT's shakespeare-char settings: lr 1e-3, warmup 100, cosine to lr/10, AdamW
    # betas (0.9, 0.99), weight decay 0.1, clip 1.0
    return TrainConfig(lr=1e-3, warmup_steps=100, min_lr_ratio=0.1, max_steps=2000, betas=(0.9, 0.99),
                       weight_decay=0.1, grad_clip=1.0, eval_every=250, log_every=50)


@dataclass
class LMRecipe(Recipe):
    """Everything a language-model run needs; saved as the run's config.json."""

    task: str = "lm"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: LMConfig = field(default_factory=LMConfig)
    train: TrainConfig = field(default_factory=_lm_train)
