"""`doctor` names a decoder that attends to the future (the copy task's classic bug) on a saved
translation run: no false alarm on the healthy run, an error naming every head once the causal
mask is taken away (planted with the copy-task harness's own hook)."""
from scratchformer.diagnostics import inspection
from scratchformer.diagnostics.doctor import examine
from scratchformer.experiments.copy_task import planted


def test_attention_on_future_positions_is_an_error(mt_run):
    subject = inspection.load(mt_run).subject(None, "valid", 16)
    [ok] = examine(subject, plots=False).by_key("future_mass")
    assert ok.level == "ok" and ok.title == "decoder self-attention: no attention on future positions"
    with planted(subject.model, "no-causal-mask"):
        [bad] = examine(subject, plots=False).by_key("future_mass")
    n_heads = sum(len(layer.self_attn.W_Q) // layer.self_attn.head_dim for layer in subject.model.transformer.decoder.layers)
    assert bad.level == "error" and bad.title == "decoder self-attention: attention on future positions"
    assert len(bad.where) == n_heads  # every head of every decoder layer looks ahead
