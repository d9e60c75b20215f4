"""One progress display for work that is not a training loop (the Trainer draws its own bar).

On a terminal a tqdm bar; off one (a log file, CI, a child process) a line at each quarter, so a
reader of the log sees the work move without a line per item."""
from __future__ import annotations

import sys
from typing import Callable


def progress_bar(total: int, desc: str | None, unit: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """`(update, close)`: `update(n)` after n more of `total` items are done; `close()` at the end.
    `desc` None: the caller asked for no display, and both do nothing."""
    if desc is None:
        return (lambda n: None), (lambda: None)
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
        return bar.update, bar.close
    done, said = [0], [0]

    def update(n: int) -> None:
        done[0] += n
        quarter = 4 * done[0] // max(total, 1)
        if quarter > said[0]:
            said[0] = quarter
            print(f"{desc}: {100 * done[0] // max(total, 1)}% of {total} {unit}s", file=sys.stderr, flush=True)
    return update, lambda: None
