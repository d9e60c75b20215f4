"""The graded path in exercises/: every solution equals torch.nn (float64, 1e-6) and passes the checker,
every skeleton as shipped fails with its own TODO hint (never a traceback), and the grader of steps
2 and 9-11 passes the solutions, fails the skeletons and fails planted mistakes.

The checker runs in-process here (`check_module`: the files are ours, trusted) so that the sixteen
files cost well under a second; one skeleton goes through the real command line and its child
process (`test_a_skeleton_through_the_command_line`)."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from scratchformer.check import check_module

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "exercises"
STEPS = sorted(p.name for p in (EX / "solutions").glob("[0-9][0-9]_*.py") if p.name[:2] <= "11")
# step 12 is your model on real data (12_your_model_on_thucnews.md), graded by `experiment yours-vs-ours`:
# its solution is a whole file, with no skeleton (tests/your_model/ trains it)
CHECKED = [s for s in STEPS if s[:2] <= "08"]  # 01-08: the checker's kinds; 09-11: the grader's tasks
WITH_BLOCKS = [*CHECKED, "09_transformer.py"]  # step 9 carries the blocks of steps 1-8, given


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"exercise_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


G = load(EX / "_grade.py")
MAKE = load(EX / "_make_skeletons.py")


def sol(name: str):
    return load(EX / "solutions" / name)


def hints(path: Path) -> list[str]:
    return re.findall(r"raise NotImplementedError\(['\"](TODO \w+): ", path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the files
def test_the_path_has_eleven_steps_each_with_its_skeleton_generated_from_its_solution():
    assert [s[:2] for s in STEPS] == [f"{i:02d}" for i in range(1, 12)]
    for solution, skeleton in MAKE.pairs():
        assert skeleton.read_text(encoding="utf-8") == MAKE.skeleton(solution.read_text(encoding="utf-8")), (
            f"{skeleton.name} differs from its solution: run `python exercises/_make_skeletons.py`")
        assert hints(skeleton), f"{skeleton.name} has no TODO"
        doc = load(solution).__doc__
        assert re.search(r"[\u4e00-\u9fff]", doc.split("English:")[0]) and "English:" in doc, solution.name  # 中文 first
        assert "Graded by" in doc, solution.name
    for name in MAKE.MISTAKES:
        assert (EX / "mistakes" / name).read_text(encoding="utf-8") == MAKE.mistake(name), name


def test_readme_lists_every_step():
    readme = (EX / "README.md").read_text(encoding="utf-8")
    for step in STEPS + ["12_your_model_on_thucnews.md"]:
        assert f"({step})" in readme, step
    assert (EX / "solutions" / "12_your_model.py").is_file()


def test_the_skeleton_maker_refuses_an_unclosed_todo():
    with pytest.raises(ValueError, match="not closed"):
        MAKE.skeleton("def f():\n    # --- TODO 99: x\n    return 1\n")


# ---------------------------------------------------------------- solutions against torch.nn, float64
def _mha_to_torch(mine, d_model, n_heads) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(d_model, n_heads, dropout=0.0, batch_first=True).double()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.W_q.weight, mine.W_k.weight, mine.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mine.W_q.bias, mine.W_k.bias, mine.W_v.bias]))
        ref.out_proj.weight.copy_(mine.W_o.weight)
        ref.out_proj.bias.copy_(mine.W_o.bias)
    return ref


def _layer_to_torch(mine, ref):
    """Copy a solution's encoder/decoder layer into torch's (same sublayer order and sizes)."""
    attns = [mine.self_attn] + ([mine.cross_attn] if hasattr(mine, "cross_attn") else [])
    refs = [ref.self_attn] + ([ref.multihead_attn] if hasattr(mine, "cross_attn") else [])
    with torch.no_grad():
        for a, r in zip(attns, refs):
            r.load_state_dict(_mha_to_torch(a, a.n_heads * a.d_k, a.n_heads).state_dict())
        ref.linear1.load_state_dict(mine.ffn.linear1.state_dict())
        ref.linear2.load_state_dict(mine.ffn.linear2.state_dict())
        for i in (1, 2, 3):
            if hasattr(mine, f"norm{i}"):
                getattr(ref, f"norm{i}").load_state_dict(getattr(mine, f"norm{i}").state_dict())
    return ref.eval()


@pytest.fixture
def f64():
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def test_solutions_1_and_3_equal_torch_attention(f64):
    m1, m3 = sol("01_attention.py"), sol("03_multihead.py")
    q, k, v = torch.randn(3, 2, 4, 5, 6).unbind(0)  # (B, H, T, d_k)
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    out, w = m1.scaled_dot_product_attention(q, k, v, keep)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), atol=1e-6, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 4, 5))
    mha = m3.MultiHeadAttention(12, 3, dropout=0.0).eval()
    x, mem = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    pad = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    out, w = mha(x, mem, mem, pad[:, None, None, :])
    ref_out, ref_w = _mha_to_torch(mha, 12, 3)(x, mem, mem, key_padding_mask=pad == 0, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=0)


def test_solutions_2_4_5_7_equal_their_references(f64):
    grade = G.Grade("02")
    G.grade_masks(sol("02_masks.py"), grade, EX / "solutions" / "02_masks.py")
    assert grade.exit_code == 0, grade.text()
    ffn = sol("04_ffn.py").FeedForward(8, 16, dropout=0.0).eval()
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(ffn(x), ffn.linear2(torch.relu(ffn.linear1(x))), atol=0, rtol=0)
    ln = sol("05_layernorm.py").LayerNorm(8)
    with torch.no_grad():
        ln.gamma.normal_(), ln.beta.normal_()
    ref = nn.LayerNorm(8, eps=ln.eps)
    ref.load_state_dict({"weight": ln.gamma, "bias": ln.beta})
    torch.testing.assert_close(ln(x * 5 + 2), ref(x * 5 + 2), atol=1e-6, rtol=0)
    from scratchformer.nn import sinusoidal_table

    pe = sol("07_positional.py").PositionalEncoding(16, max_len=50)
    assert "pe" in pe.state_dict() and tuple(pe.pe.shape) == (1, 50, 16)
    torch.testing.assert_close(pe.pe[0].double(), sinusoidal_table(50, 16).double(), atol=1e-6, rtol=0)


def test_solutions_6_and_8_equal_torch_layers(f64):
    m6, m8 = sol("06_encoder_layer.py"), sol("08_decoder_layer.py")
    x, mem = torch.randn(2, 5, 12), torch.randn(2, 7, 12)
    pad = torch.tensor([[1] * 5, [1] * 3 + [0] * 2])
    for cls, norm_first in ((m6.EncoderLayer, False), (m6.PreNormEncoderLayer, True)):
        mine = cls(12, 3, 20, dropout=0.0).eval()
        ref = _layer_to_torch(mine, nn.TransformerEncoderLayer(12, 3, 20, 0.0, batch_first=True,
                                                               norm_first=norm_first).double())
        torch.testing.assert_close(mine(x, pad[:, None, None, :]), ref(x, src_key_padding_mask=pad == 0),
                                   atol=1e-6, rtol=0, msg=cls.__name__)
    dec = m8.DecoderLayer(12, 3, 20, dropout=0.0).eval()
    ref = _layer_to_torch(dec, nn.TransformerDecoderLayer(12, 3, 20, 0.0, batch_first=True).double())
    src_pad = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    got = dec(x, mem, src_pad[:, None, None, :], m8.subsequent_mask(5))
    want = ref(x, mem, tgt_mask=~m8.subsequent_mask(5)[0], memory_key_padding_mask=src_pad == 0)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- the checker on steps 1-8
def _check(path: Path, mapping=None):
    return check_module(load(path), lang="en", mapping=mapping)


@pytest.mark.parametrize("step", WITH_BLOCKS)
def test_every_solution_passes_the_checker(step):
    report = _check(EX / "solutions" / step)
    assert report.exit_code == 0, report.text()
    assert report.components and all(c.status == "ok" for c in report.components), report.text()
    assert not [f for f in report.findings if f.severity == "bug"], report.text()


def test_the_pre_ln_layer_of_step_6_passes_through_map():
    report = _check(EX / "solutions" / "06_encoder_layer.py", {"encoder_layer": "PreNormEncoderLayer"})
    assert report.exit_code == 0, report.text()
    assert "PreNormEncoderLayer" in [c.name for c in report.components]
    assert "pre-ln" in {f.id for f in report.findings}


@pytest.mark.parametrize("step", CHECKED)
def test_every_skeleton_fails_the_checker_with_its_own_todo(step):
    report = _check(EX / step)
    text = report.text()
    assert report.exit_code in (1, 2), text
    own = hints(EX / step)[0]  # the first TODO of this step (a later one waits behind it)
    assert own in text, text
    assert "Traceback" not in text and "every component matches" not in text, text


def test_the_pre_ln_skeleton_fails_with_its_own_todo():
    report = _check(EX / "06_encoder_layer.py", {"encoder_layer": "PreNormEncoderLayer"})
    assert report.exit_code == 1 and "TODO 06b" in report.text(), report.text()


def test_the_mistakes_of_the_docs_page_are_named():
    for name, bug in (("01_no_scale.py", "missing-scale"), ("01_mask_fill_zero.py", "mask-fill-zero")):
        report = _check(EX / "mistakes" / name)
        assert report.exit_code == 1, report.text()
        assert [c.ids for c in report.components] == [[bug]], report.text()


# (step, the line as solved, the mistake, the id the step's docstring promises); every occurrence is
# replaced (the TODO hint quotes some of these lines)
MISTAKES = [
    ("01_attention.py", "/ math.sqrt(d_k)", "", "missing-scale"),
    ("01_attention.py", "/ math.sqrt(d_k)", "/ d_k", "wrong-scale"),
    ("01_attention.py", "masked_fill(mask == 0, -1e9)", "masked_fill(mask == 0, 0)", "mask-fill-zero"),
    ("01_attention.py", "torch.softmax(scores, dim=-1)", "torch.softmax(scores, dim=-2)", "softmax-dim"),
    ("02_masks.py", "torch.tril(torch.ones(1, size, size, dtype=torch.bool))",
     "torch.ones(1, size, size, dtype=torch.bool)", "no-causal-mask"),
    ("02_masks.py", "torch.tril(torch.ones(1, size, size, dtype=torch.bool))",
     "torch.tril(torch.ones(1, size, size, dtype=torch.bool), diagonal=-1)", "no-causal-mask"),  # off by one
    ("03_multihead.py", ".view(B, -1, self.n_heads, self.d_k).transpose(1, 2)", ".view(B, self.n_heads, -1, self.d_k)",
     "heads-not-transposed"),
    ("03_multihead.py", "out.transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_k)",
     "out.contiguous().view(B, -1, self.n_heads * self.d_k)", "heads-merge-order"),
    ("04_ffn.py", "torch.relu(self.linear1(x))", "self.linear1(x)", "ffn-no-activation"),
    ("05_layernorm.py", "torch.sqrt(var + self.eps)", "(x.std(-1, keepdim=True) + self.eps)", "unbiased-std"),
    ("06_encoder_layer.py", "self.norm1(x + self.dropout(", "self.norm1((", "no-residual"),
    ("07_positional.py", 'self.register_buffer("pe", pe.unsqueeze(0))', "self.pe = pe.unsqueeze(0)", "pe-not-buffer"),
    ("07_positional.py", "(-math.log(10000.0) / d_model)", "(-math.log(10000.0) / d_model) * 2", "pe-wrong-formula"),
    ("08_decoder_layer.py", "self.self_attn(x, x, x, tgt_mask)", "self.self_attn(x, x, x, None)", "no-causal-mask"),
    ("08_decoder_layer.py", "self.cross_attn(x, memory, memory, src_mask)", "self.cross_attn(x, x, x, src_mask)",
     "cross-attention-kv"),
]


@pytest.mark.parametrize("step, right, wrong, bug", MISTAKES, ids=[f"{m[0][:2]}-{m[3]}" for m in MISTAKES])
def test_the_mistakes_each_step_warns_of_are_named_on_its_own_code(tmp_path, step, right, wrong, bug):
    text = (EX / "solutions" / step).read_text(encoding="utf-8")
    assert right in text and bug in text  # the docstring names the id it promises
    planted = tmp_path / step
    planted.write_text(text.replace(right, wrong), encoding="utf-8")
    report = _check(planted)
    assert report.exit_code == 1, report.text()
    assert bug in {i for c in report.components for i in c.ids}, report.text()


def test_a_skeleton_through_the_command_line():
    """The real command: a child process loads the skeleton; the learner sees the hint, not a traceback."""
    done = subprocess.run([sys.executable, "-m", "scratchformer.cli", "check", "exercises/04_ffn.py", "--lang", "en"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TODO 04: linear1" in done.stdout and "Traceback" not in done.stdout + done.stderr


# ---------------------------------------------------------------- the grader of steps 2 and 9-11
@pytest.mark.parametrize("step", ["02_masks.py", "10_decoding.py"])
def test_the_grader_passes_the_quick_solutions_and_fails_their_skeletons(step):
    good = G.grade_file(EX / "solutions" / step)
    assert good.exit_code == 0, good.text()
    bad = G.grade_file(EX / step)
    assert bad.exit_code == 1 and hints(EX / step)[0] in bad.text() and "Traceback" not in bad.text(), bad.text()


def test_the_whole_transformer_learns_the_copy_task():
    good = G.grade_file(EX / "solutions" / "09_transformer.py")
    assert good.exit_code == 0, good.text()
    assert len(good.results) == 4  # shape, causality, padding, the copy task
    bad = G.grade_file(EX / "09_transformer.py")
    assert bad.exit_code == 1 and "TODO 09a" in bad.text(), bad.text()


def test_the_learners_training_loop_trains_the_graders_model():
    good = G.grade_file(EX / "solutions" / "11_training.py")
    assert good.exit_code == 0, good.text()
    assert len(good.results) == 4  # the schedule, the optimizer's rate, the loss, training
    bad = G.grade_file(EX / "11_training.py")
    assert bad.exit_code == 1 and "TODO 11a" in bad.text(), bad.text()


def test_the_grader_catches_planted_mistakes(monkeypatch):
    path = EX / "solutions" / "09_transformer.py"
    m9 = sol("09_transformer.py")
    grade = G.Grade("09")
    monkeypatch.setattr(G, "tgt_mask", G.pad_mask)  # the decoder sees the future: no causal mask
    G.grade_transformer(m9, grade, path)
    assert [ok for ok, _ in grade.results] == [True, False, True], grade.text()  # and no training
    monkeypatch.undo()

    m10 = sol("10_decoding.py")
    real = m10.beam_search
    monkeypatch.setattr(m10, "beam_search", lambda *a, **k: real(*a, **{**k, "beam_size": 1}))  # beam = greedy
    grade = G.Grade("10")
    G.grade_decoding(m10, grade, EX / "solutions" / "10_decoding.py")
    assert grade.exit_code == 1 and "finds [<bos> B <eos>]" in [w for ok, w in grade.results if not ok][0], grade.text()

    m11 = sol("11_training.py")
    monkeypatch.setattr(m11, "make_optimizer", lambda model, d, w, factor=1.0: (
        lambda o: (o, torch.optim.lr_scheduler.LambdaLR(o, lambda s: m11.noam_lr(s, d, w, factor))))(
        torch.optim.Adam(model.parameters(), lr=1.0)))  # LambdaLR's step 0 read as step 1: off by one
    grade = G.Grade("11")
    G.grade_training(m11, grade, EX / "solutions" / "11_training.py", steps=0)
    assert "optimizer step n uses noam_lr(n)" in [w for ok, w in grade.results if not ok][0], grade.text()


def test_the_grader_command_line(capsys):
    assert G.main([str(EX / "solutions" / "02_masks.py")]) == 0
    assert capsys.readouterr().out.startswith("02_masks.py: passed")
    assert G.main([str(EX / "02_masks.py")]) == 1
    assert "TODO 02a" in capsys.readouterr().out
    assert G.main([]) == 2 and "usage" in capsys.readouterr().out


def test_the_grader_says_in_one_line_when_a_file_cannot_be_loaded(tmp_path):
    broken = tmp_path / "09_transformer.py"
    broken.write_text("import torch\nraise RuntimeError('my own bug')\n")
    grade = G.grade_file(broken)
    assert grade.exit_code == 2 and grade.text().count("\n") == 0
    assert "RuntimeError: my own bug (09_transformer.py, line 2)" in grade.text()
    assert G.grade_file(EX / "solutions" / "03_multihead.py").exit_code == 2  # not a graded step: says which are
