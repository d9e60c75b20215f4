"""Sweeps and experiments: put the tutorials' claims to the test, with repeats and verdicts.

- `sweep.sweep(SweepSpec(...))` (`scratchformer sweep`): every cell of a grid × seeds as an
  ordinary `scratchformer train` run (runner.py, child.py), then the table (results.py) and
  the figures (plots.py). Resumable.
- `experiment.run_experiment(name, out)` (`scratchformer experiment`): a spec from
  `recipes/experiments/` (spec.py) -> a sweep -> checks (verdict.py) -> `report.md` (report.py).
- `params.params_table(run)` (`scratchformer params`): parameters per component, counted and in
  closed form.

This package drives training only through the command line's front door
(`scratchformer.cli.main(["train", ...])`) and reads results from run folders, so it does not
depend on how a task is built inside.
"""
