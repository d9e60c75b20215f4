"""Looking inside trained models: attention maps (PNG grids with CJK labels, a top-K table,
an offline HTML page) and `doctor`, a report of what is wrong or unusual in a run.

Layering: this package sits above `tasks` and below `commands`, and knows no task: each task's
inspect slot (`tasks/<task>/inspect.py`, found by `inspection.load`) hands it an `AttentionResult`
or a `Subject` (records in `tasks/inspection.py`); the rest works on tensors and token strings.
"""
