"""The Trainer's evaluation and records: the validation pass and the best model it keeps, the
training-loss windows, metrics.jsonl, train_status.json, curves.png and the summary.

A mixin of `Trainer` (train/trainer.py), kept apart so the loop reads on its own; it uses the
Trainer's `cfg`, `state`, `task`, `model`, `dist`, `device`, `run_dir` and `valid_batches`.
"""
from __future__ import annotations

import json
import math
import sys
import time
import warnings
from typing import Any

import torch

from scratchformer.errors import UserError
from scratchformer.fileio import append_text
from scratchformer.train.checkpoint import atomic_write_bytes
from scratchformer.train.curves import plot_curves
from scratchformer.train.rng import forked_rng
from scratchformer.train.run_files import CURVES, METRICS, WEIGHTS, write_train_status


class EvaluationMixin:
    def _evaluate(self, bar=None) -> bool:
        """Evaluate on the validation batches; track the best model. False if there are none."""
        if self.valid_batches is None:
            return False
        with self._averaged_weights():  # train.ema: the average is what is judged and kept
            return self._evaluate_these_weights(bar)

    def _evaluate_these_weights(self, bar) -> bool:
        cfg, st = self.cfg, self.state
        self.model.eval()
        try:
            with forked_rng(self.device), torch.no_grad(), self._autocast(), self._gathered():
                raw = self.task.evaluate(b.to(self.device) for b in self.valid_batches())
        finally:
            self.model.train()
        # rank 0's numbers for every process: the best checkpoint and early stopping follow them
        metrics = self.dist.agree(lambda: {k: float(v) for k, v in raw.items()})
        if cfg.metric not in metrics:
            raise UserError(
                f"metric '{cfg.metric}' is not among task.evaluate's results "
                f"({', '.join(sorted(metrics))}); set metric to one of them"
            )
        value = metrics[cfg.metric]
        st.last_eval, st.last_eval_step = metrics, st.step
        best = st.best_metric
        improved = math.isfinite(value) and (
            best is None or (value < best if cfg.metric_mode == "min" else value > best)
        )
        if improved:
            st.best_metric, st.best_step, st.bad_evals = value, st.step, 0
            data = self._weights_bytes(self._position())  # fsdp: every process sends its shard
            if self.dist.is_main:
                atomic_write_bytes(self.run_dir / WEIGHTS, data)
        else:
            st.bad_evals += 1
        row = {"step": st.step, "epoch": st.epoch, "split": "valid"}
        row.update({k: v for k, v in metrics.items() if k not in row})
        row["elapsed"] = round(self._elapsed(), 3)
        self._append(row)
        if bar is not None:
            bar.set_postfix(self._postfix(), refresh=False)
        if cfg.progress and self.dist.is_main and not sys.stderr.isatty():
            # no bar off a terminal (tqdm draws none): a log file or CI sees one line per evaluation
            train = f", train loss {self._last_train_loss:.4f}" if self._last_train_loss is not None else ""
            best = f"{st.best_metric:.4f} at step {st.best_step}" if st.best_metric is not None else "none yet"
            print(f"step {st.step}/{self.total_steps} (epoch {st.epoch}): valid {cfg.metric} {value:.4f}, best "
                  f"{best}{train}, {self._elapsed():.0f} s", file=sys.stderr, flush=True)
        self._plot()
        return True

    def _log_train(self, bar) -> None:
        st = self.state
        if st.window_count == 0:
            return
        now = time.monotonic()
        loss = st.window_loss / st.window_count
        row: dict[str, Any] = {
            "step": st.step,
            "epoch": st.epoch,
            "split": "train",
            "loss": loss,
            "lr": self._last_lr,
            "tokens_per_s": round(self._win_tokens / max(now - self._win_t0, 1e-9), 1),
            "elapsed": round(self._elapsed(), 3),
        }
        for k, v in st.window_extras.items():
            row.setdefault(k, v / st.window_count)
        self._append(row)
        self._last_train_loss = loss
        self._last_tps = row["tokens_per_s"]
        st.window_loss, st.window_count, st.window_extras = 0.0, 0, {}
        self._win_tokens, self._win_t0 = 0, now
        bar.set_postfix(self._postfix(), refresh=False)

    def _postfix(self) -> dict[str, str]:
        post = {}
        if self._last_train_loss is not None:
            post["loss"] = f"{self._last_train_loss:.4f}"
        post["lr"] = f"{self._last_lr:.2e}"
        if self._last_tps is not None:
            post["tok/s"] = f"{self._last_tps:.0f}"
        if self.cfg.metric in self.state.last_eval:
            post[f"val_{self.cfg.metric}"] = f"{self.state.last_eval[self.cfg.metric]:.4f}"
        return post

    def _append(self, row: dict) -> None:
        if not self.dist.is_main:
            return
        append_text(self.run_dir / METRICS, json.dumps(row) + "\n")

    def _write_status(self, finished: bool) -> None:
        if self.dist.is_main:
            write_train_status(self.run_dir, self.state.step, finished, self.state.stop_reason)

    def _plot(self) -> None:
        if not self.dist.is_main:
            return
        try:
            plot_curves(self.run_dir / METRICS, self.run_dir / CURVES)
        except Exception as e:  # noqa: BLE001 - a plot must never kill a training run
            warnings.warn(f"could not draw {self.run_dir / CURVES}: {e}", stacklevel=2)

    def summary(self) -> dict[str, Any]:
        """Where the run stands: step, epoch, why it stopped, best and last validation metrics."""
        st = self.state
        out: dict[str, Any] = {
            "step": st.step,
            "epoch": st.epoch,
            "stop_reason": st.stop_reason,
            "elapsed": round(self._elapsed(), 3),
            "train_loss": self._last_train_loss,
            "metric": self.cfg.metric,
            "best_metric": st.best_metric,
            "best_step": st.best_step,
        }
        if self.cfg.ema:
            out["weights"] = f"exponential moving average, decay {self.cfg.ema}"
        out.update({f"valid_{k}": v for k, v in st.last_eval.items()})
        return out
