"""Looking inside trained models: attention maps (PNG grids with CJK labels, a top-K table,
an offline HTML page) and `doctor`, a report of what is wrong or unusual in a run.

Layering: this package sits above `tasks` and below `commands`. Only `adapters.py` knows the
tasks; the rest works on tensors and token strings (`maps.AttentionView`, `subject.Subject`).
"""
