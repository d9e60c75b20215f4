"""The three kinds of step a task pipeline names, and who runs each: the pipeline says *what* a
step is, this module says *who* does it, so that no task remembers rank 0 by hand.

- `build_once(work)`: a step that may fill the shared cache (prepared data, a data set's download,
  a tokenizer's counts, a pretrained checkpoint). Under torchrun rank 0 builds it first while the
  others wait, then the others run the same step and find it complete (`distributed.main_first`).
  Every process calls it at the same point: it belongs in setup, never inside `write_once`.
- `decide_once(decide)`: a choice every process must share (a budget plan, an estimate): made on
  rank 0 and broadcast as JSON (`distributed.agree`).
- `write_once(work)`: a step whose only product is the run's files and report (a test score, a
  baseline, a blend, the final weights): done by the one writer (rank 0, or the only process);
  the others get `None` and do nothing.

One process: each is simply `work()`. Behaviour under torchrun is that of the `distributed`
functions these wrap; tests/train/test_distributed.py and test_torchrun.py hold it."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, TypeVar

from .distributed import agree, is_main, main_first, world_size

T = TypeVar("T")


def build_once(work: Callable[[], T]) -> T:
    """`work()` on every process, rank 0 first (it fills the cache, the others read it)."""
    return main_first(work)


def decide_once(decide: Callable[[], Any], as_: type | None = None) -> Any:
    """Rank 0's `decide()` (JSON-serialisable) on every process. `as_`: a dataclass of plain
    fields that `decide()` returns; it travels as its fields and is rebuilt on every process (one
    process: `decide()`'s own object)."""
    if as_ is None:
        return agree(decide)
    if world_size() <= 1:
        return decide()
    return as_(**agree(lambda: asdict(decide())))


def write_once(work: Callable[[], T]) -> T | None:
    """`work()` on the run's one writer; `None` on every other process."""
    return work() if is_main() else None


def writes() -> bool:
    """Whether this process is the run's writer (for a step that is more than one call: prefer
    `write_once`)."""
    return is_main()


__all__ = ["build_once", "decide_once", "write_once", "writes"]
