"""The classification recipe: every setting of a `train classify` run (saved as config.json)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ...config import JsonConfig, check_count
from ...errors import UserError
from ...models.classifier import ClassifierConfig
from ...train import TrainConfig
from ..runs import Recipe, check_batching, check_ensemble, check_minutes, check_tokenizer


@dataclass
class ClassifyDataConfig(JsonConfig):
    dataset: str = "thucnews"  # a registered data set, or the path of the user's training file
    dataset_options: dict = field(default_factory=dict)  # e.g. {"fields": "title"} for inews
    valid_file: str | None = None
    test_file: str | None = None
    text_col: str | int | None = None
    label_col: str | int | None = None
    tokenizer: str = "auto"  # char | word | bpe | wordpiece | auto (char for CJK text, else bpe)
    vocab_size: int = 8000  # bpe / wordpiece
    min_freq: int = 1  # char / word: rarer tokens become <unk>
    lowercase: bool = False
    max_len: int = 128  # tokens per segment, <cls> included
    long_mode: str = "truncate"  # truncate | segments (encode each window, pool per document)
    truncate_keep: str = "head"  # head | tail | head+tail
    max_segments: int = 8
    batch_size: int = 64
    max_tokens: int | None = None  # token budget per batch instead of batch_size
    label_smoothing: float = 0.0
    # train on the first max_train texts of the (seeded, fixed) training split only: a
    # pretrained backbone too slow for all of it on this machine (None: all)
    max_train: int | None = None
    # cross-fitting (distill.py): train without the texts i with i % folds == holdout_fold
    holdout_fold: int | None = None
    folds: int | None = None

    def __post_init__(self) -> None:
        if (self.holdout_fold is None) != (self.folds is None) or (
                self.folds is not None and not 0 <= self.holdout_fold < self.folds):
            raise UserError(f"data.holdout_fold must be in [0, data.folds) and both set or neither, got "
                            f"holdout_fold={self.holdout_fold}, folds={self.folds}")
        if self.long_mode not in ("truncate", "segments"):
            raise UserError(f"long_mode must be 'truncate' or 'segments', got {self.long_mode!r}")
        if self.max_len < 2:
            raise UserError("max_len must be at least 2")
        check_batching(self.batch_size, self.max_tokens)
        check_tokenizer("data.tokenizer", self.tokenizer)
        if self.batch_size is None:
            raise UserError("data.batch_size must be a whole number >= 1, got None")
        if self.max_segments < 1:
            raise UserError(f"data.max_segments must be >= 1, got {self.max_segments}")
        check_count("data.vocab_size", self.vocab_size)
        check_count("data.min_freq", self.min_freq)
        if self.max_train is not None and self.max_train < 1:
            raise UserError(f"data.max_train must be >= 1 (or null for all), got {self.max_train}")


@dataclass
class ClassifyRecipe(Recipe):
    """Everything a classification run needs; saved as the run's config.json."""

    task: str = "classify"
    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10, metric="accuracy", metric_mode="max"))
    # >1: train members with seeds seed, seed+1, ...; predict with their mean probabilities.
    # 0 (the adaptive default's): as many members as the time budget fits, at most MAX_AUTO_MEMBERS
    ensemble: int = 1
    # minutes for the whole run (baseline, training, evaluations, test); the pipeline measures a
    # few steps and plans train.max_steps to fit (budget.py). None: no plan, the train section rules
    time_budget: float | None = None
    plan: dict | None = None  # what the planner measured and chose (filled in once, when resolved)
    # predict with ours averaged with the TF-IDF baseline, the weight chosen on valid (blend.py);
    # needs the baseline (not --no-baseline) and a valid split. The adaptive default turns it on
    blend: bool = False
    # distillation (distill.py): also learn a finished run's probabilities on the training texts
    # (`teacher`: its run directory, e.g. an ensemble; never its blend), `distill_weight` of the
    # loss on them and the rest on the labels. 0.9 beat 0.5 on both data sets measured (README,
    # "One model taught by the ensemble"; 3 seeds, not a finding by itself)
    teacher: str | None = None
    distill_weight: float = 0.9
    # both distributions are softened at this temperature (Hinton et al.): an ensemble is ~96%
    # sure on the texts it was trained on, so at 1 its probabilities are nearly the labels
    distill_temperature: float = 2.0
    # an ensemble whose member i leaves out every `ensemble`-th training text from the i-th: a
    # teacher that has, for every training text, a member that never saw it (distill.py)
    cross_fit: bool = False
    # R-Drop (Liang et al. 2021): each training batch goes through the model twice (two dropout
    # masks); the loss adds this weight times the symmetric KL between the two predictions. 0: off
    rdrop: float = 0.0

    def __post_init__(self) -> None:
        check_ensemble(self.ensemble, auto=True)
        if not self.rdrop >= 0:
            raise UserError(f"rdrop must be >= 0 (the weight of the KL between two dropout passes; 0 = off), got {self.rdrop}")
        check_minutes("time_budget (--time-budget)", self.time_budget)
        if not 0.0 <= self.distill_weight <= 1.0:
            raise UserError(f"distill_weight must be in [0, 1] (the share of the loss on the teacher), "
                            f"got {self.distill_weight}")
        if not self.distill_temperature > 0:
            raise UserError(f"distill_temperature must be > 0, got {self.distill_temperature}")
        if self.cross_fit and self.ensemble < 2:
            raise UserError(f"cross_fit needs an ensemble of 2 or more members (one per fold), got ensemble={self.ensemble}")
        if self.ensemble == 0 and self.time_budget is None:
            raise UserError("ensemble=0 (as many members as the time budget fits) needs a time budget: "
                            "add --time-budget MIN, or set ensemble to a number")
