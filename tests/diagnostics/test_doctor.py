"""`scratchformer doctor` finds planted faults and raises no false alarm on a healthy run.

Each fault is planted in a freshly loaded copy of the same tiny trained classifier (4 heads,
2 layers, Chinese characters); the run is trained once per session (conftest.py)."""
import json

import pytest
import torch

from scratchformer.cli import main
from scratchformer.diagnostics import inspection
from scratchformer.diagnostics.doctor import examine

SAMPLES = 48


def _subject(run):
    return inspection.load(run).subject(None, "valid", SAMPLES)


def _levels(report, key):
    return {f.level for f in report.by_key(key)}


def _attn(subject, layer):
    return subject.heads["encoder self-attention"][layer]


def test_healthy_run_gets_no_false_alarm(clf_run, capsys):
    assert main(["doctor", str(clf_run), "--samples", str(SAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "0 error(s), 0 warning(s)" in out and "no attention on padding" in out
    md = (clf_run / "doctor.md").read_text(encoding="utf-8")
    for field in ("**measured**", "**normal**", "**what it means**", "**what to try**"):
        assert md.count(field) >= 8
    for png in ("doctor_heads.png", "doctor_similarity.png", "doctor_layers.png"):
        assert (clf_run / png).stat().st_size > 5_000
    data = json.loads((clf_run / "doctor.json").read_text(encoding="utf-8"))
    pad = data["numbers"]["views"]["encoder self-attention"]["pad_mass"]
    assert max(max(row) for row in pad) == 0.0
    assert data["numbers"]["views"]["encoder self-attention"]["padded_keys"] > 0  # the check measured something


def test_broken_padding_mask_is_an_error(clf_run, monkeypatch):
    subject = _subject(clf_run)
    enc = subject.model.encoder
    forward = enc.forward
    def without_mask(x, mask=None, **kw):  # the bug: the stack never sees the padding mask
        return forward(x, None, **{k: v for k, v in kw.items() if k != "padding_mask"})

    monkeypatch.setattr(enc, "forward", without_mask)
    report = examine(subject, plots=False)
    [pad] = report.by_key("padding_mass")
    assert pad.level == "error" and len(pad.where) == 8  # every head of both layers leaks


def test_two_identical_heads_are_flagged(clf_run):
    subject = _subject(clf_run)
    attn = _attn(subject, 0)
    d, hd = attn.n_heads * attn.head_dim, attn.head_dim
    with torch.no_grad():
        for part in (0, d):  # W_Q and W_K rows of head 2 := head 1's
            attn.qkv_proj.weight[part + hd:part + 2 * hd] = attn.qkv_proj.weight[part:part + hd]
            attn.qkv_proj.bias[part + hd:part + 2 * hd] = attn.qkv_proj.bias[part:part + hd]
    [dup] = examine(subject, plots=False).by_key("redundant_heads")
    assert dup.level == "warning" and dup.where == ["encoder self-attention L1 H1 ~ H2"]


def test_identity_head_is_flagged(clf_run):
    subject = _subject(clf_run)
    attn = _attn(subject, 1)
    h = 2

    def only_self(_module, args, kwargs):  # head 3 of layer 2 may attend only to its own position
        T = kwargs.get("padding_mask", kwargs.get("key_padding_mask")).shape[1]
        mask = torch.ones(1, attn.n_heads, T, T, dtype=torch.bool)
        mask[0, h] = torch.eye(T, dtype=torch.bool)
        return args, {**kwargs, "attn_mask": mask}

    attn.register_forward_pre_hook(only_self, with_kwargs=True)
    report = examine(subject, plots=False)
    [ident] = report.by_key("identity_heads")
    assert ident.level == "warning" and ident.where == ["encoder self-attention L2 H3"]
    assert report.numbers["views"]["encoder self-attention"]["diagonal"][1][2] == pytest.approx(1.0)
    [fixed] = report.by_key("fixed_position_heads")
    assert fixed.level == "ok"  # an identity head looks at a different position for every token


def test_dead_head_is_prunable_at_no_cost(clf_run):
    subject = _subject(clf_run)
    attn = _attn(subject, 0)
    d, hd, h = attn.n_heads * attn.head_dim, attn.head_dim, 3
    with torch.no_grad():  # W_V rows (and bias) of head 4 := 0: the head outputs nothing
        attn.qkv_proj.weight[2 * d + h * hd:2 * d + (h + 1) * hd] = 0
        attn.qkv_proj.bias[2 * d + h * hd:2 * d + (h + 1) * hd] = 0
    report = examine(subject, plots=False)
    [imp] = report.by_key("head_importance")
    delta = torch.tensor(report.numbers["importance"]["encoder self-attention"])
    assert float(delta[0, 3]) == pytest.approx(0.0, abs=1e-7)
    assert "encoder self-attention L1 H4" in imp.where
    assert float(delta.max()) > 0  # some head matters


def test_embedding_row_never_updated_is_an_error(clf_run):
    subject = _subject(clf_run)
    [table] = subject.embeddings
    tok = inspection.load(clf_run).clf.tokenizer
    i = tok.token_to_id("球")
    assert int(table.train_counts[i]) > 10
    with torch.no_grad():
        table.weight[i] = table.initial[i]  # as if it never got a gradient
    [emb] = examine(subject, plots=False).by_key("embedding_rows")
    assert emb.level == "error" and emb.where == ["球"]


def test_nan_weight_is_found_and_named(clf_run, tmp_path):
    subject = _subject(clf_run)
    with torch.no_grad():
        subject.model.encoder.layers[1].ffn.linear_in.weight[0, 0] = float("nan")
    report = examine(subject, tmp_path)
    [nan] = report.by_key("non_finite_weights")
    assert nan.level == "error" and nan.where == ["encoder.layers.1.ffn.linear_in.weight"]
    assert report.findings[0].level == "error" and (tmp_path / "doctor.md").exists()


def test_other_tasks(lm_run, mt_run, mlm_run, capsys):
    for run in (lm_run, mt_run, mlm_run):
        assert main(["doctor", str(run), "--samples", "16", "--json"]) == 0
        found = json.loads(capsys.readouterr().out)["findings"]
        assert not [f for f in found if f["level"] == "error"], (run, found)
    data = json.loads((mt_run / "doctor.json").read_text(encoding="utf-8"))
    assert set(data["numbers"]["views"]) == {"encoder self-attention", "decoder self-attention", "cross-attention"}
    pad = [f for f in data["findings"] if f["key"] == "padding_mass"]
    assert len(pad) == 3 and all(f["level"] == "ok" for f in pad)
    assert set(data["numbers"]["importance"]) == {"encoder self-attention", "decoder self-attention", "cross-attention"}
    lm = json.loads((lm_run / "doctor.json").read_text(encoding="utf-8"))
    assert [f["level"] for f in lm["findings"] if f["key"] == "padding_mass"] == ["note"]  # LM windows have no padding


def test_bad_arguments_are_one_line_errors(clf_run, tmp_path, capsys):
    assert main(["doctor", str(tmp_path)]) == 2
    assert main(["doctor", str(clf_run), "--data", str(tmp_path / "missing.tsv")]) == 2
    assert main(["doctor", str(clf_run), "--samples", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("error: ") == 3 and "Traceback" not in err
