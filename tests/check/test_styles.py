"""The styles of today's GPT and LLaMA courses, checked as written (issue 51): the GPT video's per-head
modules and module-level sizes, the minimal-GPT repository's GPTConfig and fused c_attn, LLaMA with
complex freqs_cis, GQA and SwiGLU, LLaMA with cos/sin tables, rotate_half and an HF-style shifted loss.
Each correct file exits 0 with the learner's own sizes; each planted bug is named exactly, on the
component where it is, and nowhere else; a skipped component never gives exit 0."""
import importlib.util
import sys
from pathlib import Path

import pytest

from scratchformer.check import check_module
from scratchformer.check.catalogue import CATALOGUE
from scratchformer.check.report import Component, Report

FIX = Path(__file__).parent / "fixtures"
STYLES = ["gpt_video", "mingpt", "llama", "llama_cossin"]

# (style, planted id, the component kind that must show it, replacements)
PLANTS = [
    ("gpt_video", "missing-scale", "attention", [(" * k.shape[-1] ** -0.5", "")]),
    ("gpt_video", "wrong-scale", "attention", [("k.shape[-1] ** -0.5", "C ** -0.5")]),
    ("gpt_video", "softmax-dim", "attention", [("F.softmax(wei, dim=-1)", "F.softmax(wei, dim=1)")]),
    ("gpt_video", "no-causal-mask", "attention", [("        wei = wei.masked_fill(self.tril[:T, :T] == 0, float('-inf'))\n", "")]),
    ("gpt_video", "mask-fill-zero", "attention", [("float('-inf'))", "0.0)")]),
    ("gpt_video", "ffn-no-activation", "feed_forward", [("            nn.ReLU(),\n", "")]),
    ("gpt_video", "no-residual", "block", [("x = x + self.sa(self.ln1(x))", "x = self.sa(self.ln1(x))")]),
    ("gpt_video", "post-ln-residual", "block", [("x = x + self.sa(self.ln1(x))", "x = self.ln1(x)\n        x = x + self.sa(x)")]),
    ("gpt_video", "missing-final-norm", "model", [("        x = self.ln_f(x)\n", "")]),
    ("gpt_video", "extra-final-norm", "model", [("x = self.ln_f(x)", "x = self.ln_f(self.ln_f(x))")]),
    ("gpt_video", "attention-dropout-in-eval", "attention", [("wei = self.dropout(wei)", "wei = F.dropout(wei, p=dropout)")]),
    ("mingpt", "missing-scale", "attention", [(" * (1.0 / math.sqrt(k.size(-1)))", "")]),
    ("mingpt", "heads-merge-order", "attention", [("y.transpose(1, 2).contiguous().view(B, T, C)", "y.contiguous().view(B, T, C)")]),
    ("mingpt", "no-causal-mask", "attention", [("        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n", "")]),
    ("mingpt", "eps-outside-sqrt", "layer_norm", [("return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)",
                                                    "m = input.mean(-1, keepdim=True)\n        s = input.std(-1, keepdim=True, unbiased=False)\n"
                                                    "        return self.weight * (input - m) / (s + 1e-5) + self.bias")]),
    ("mingpt", "layernorm-wrong-axis", "layer_norm", [("return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)",
                                                        "m = input.mean(1, keepdim=True)\n        v = input.var(1, keepdim=True, unbiased=False)\n"
                                                        "        return self.weight * (input - m) / torch.sqrt(v + 1e-5) + self.bias")]),
    ("mingpt", "ffn-no-activation", "feed_forward", [("self.c_proj(self.gelu(self.c_fc(x)))", "self.c_proj(self.c_fc(x))")]),
    ("mingpt", "post-ln-residual", "block", [("x = x + self.mlp(self.ln_2(x))", "x = self.ln_2(x)\n        x = x + self.mlp(x)")]),
    ("mingpt", "no-residual", "block", [("x = x + self.mlp(self.ln_2(x))", "x = self.mlp(self.ln_2(x))")]),
    ("mingpt", "missing-final-norm", "model", [("        x = self.transformer.ln_f(x)\n", "")]),
    ("mingpt", "extra-final-norm", "model", [("x = self.transformer.ln_f(x)", "x = self.transformer.ln_f(self.transformer.ln_f(x))")]),
    ("mingpt", "attention-dropout-in-eval", "attention", [("att = self.attn_dropout(att)", "att = F.dropout(att, p=self.attn_dropout.p)")]),
    ("llama", "rmsnorm-eps-outside", "rms_norm", [("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
                                                   "x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)")]),
    ("llama", "rmsnorm-mean-not-square", "rms_norm", [("x.pow(2).mean(-1, keepdim=True)", "x.mean(-1, keepdim=True).pow(2)")]),
    ("llama", "swiglu-wrong-gate", "feed_forward", [("F.silu(self.w1(x)) * self.w3(x)", "F.silu(self.w1(x) * self.w3(x))")]),
    ("llama", "gqa-repeat-wrong", "attention", [("""    return (x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim)
            .reshape(bs, slen, n_kv_heads * n_rep, head_dim))""", "    return x.repeat(1, 1, n_rep, 1)")]),
    ("llama", "missing-scale", "attention", [(" / math.sqrt(self.head_dim)", "")]),
    ("llama", "no-causal-mask", "attention", [("        scores = scores + self.mask[:, :, :seqlen, :seqlen]\n", "")]),
    ("llama", "no-residual", "block", [("h = x + self.attention(", "h = self.attention(")]),
    ("llama", "missing-final-norm", "model", [("        h = self.norm(h)\n", "")]),
    ("llama", "extra-final-norm", "model", [("h = self.norm(h)", "h = self.norm(self.norm(h))")]),
    ("llama", "attention-dropout-in-eval", "attention", [("scores = self.attn_dropout(scores)", "scores = F.dropout(scores, p=self.attn_dropout.p)")]),
    ("llama", "loss-on-padding", "model", [("""targets.view(-1),
                                   ignore_index=self.params.pad_id)""", "targets.view(-1))")]),
    ("llama_cossin", "rope-pairing", "attention", [("""    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)""", """    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)""")]),
    ("llama_cossin", "rope-pairing", "attention", [("emb = torch.cat([freqs, freqs], dim=-1)",
                                                    "emb = torch.repeat_interleave(freqs, 2, dim=-1)")]),
    ("llama_cossin", "rmsnorm-eps-outside", "rms_norm", [("torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)",
                                                          "torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True)) + self.eps")]),
    ("llama_cossin", "rmsnorm-mean-not-square", "rms_norm", [("torch.mean(x * x, dim=-1, keepdim=True)", "torch.mean(x, dim=-1, keepdim=True) ** 2")]),
    ("llama_cossin", "swiglu-wrong-gate", "feed_forward", [("F.silu(self.gate_proj(x)) * self.up_proj(x)",
                                                            "F.silu(self.up_proj(x)) * self.gate_proj(x)")]),
    ("llama_cossin", "ffn-no-activation", "feed_forward", [("F.silu(self.gate_proj(x)) * self.up_proj(x)",
                                                            "self.gate_proj(x) * self.up_proj(x)")]),
    ("gpt_video", "weights-not-loaded", "model", [("model.load_state_dict(ckpt['model'], strict=False)",
                                                   "model.load_state_dict(ckpt, strict=False)")]),
    ("mingpt", "weights-not-loaded", "model", [("    state_dict = {k[len(unwanted_prefix):] if k.startswith(unwanted_prefix) "
                                                "else k: v for k, v in state_dict.items()}\n", "")]),
    ("mingpt", "layernorm-wrong-axis", "layer_norm", [("return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)",
                                                        "m = input.mean(0, keepdim=True)\n        v = input.var(0, keepdim=True, unbiased=False)\n"
                                                        "        return self.weight * (input - m) / torch.sqrt(v + 1e-5) + self.bias")]),
    ("llama_cossin", "post-ln-residual", "block", [("x = x + self.mlp(self.post_attention_layernorm(x))",
                                                    "x = self.post_attention_layernorm(x)\n        x = x + self.mlp(x)")]),
    ("llama_cossin", "mask-inverted", "model", [("masked_fill(mask == 0,", "masked_fill(mask == 1,")]),
    ("llama_cossin", "target-not-shifted", "model", [("shift_logits = logits[:, :-1, :]", "shift_logits = logits"),
                                                     ("shift_labels = labels[:, 1:]", "shift_labels = labels")]),
    ("llama_cossin", "loss-on-padding", "model", [("shift_labels, ignore_index=PAD_ID)", "shift_labels)")]),
    ("llama_cossin", "missing-final-norm", "model", [("logits = self.lm_head(self.norm(h))", "logits = self.lm_head(h)")]),
]


def plant(tmp_path: Path, style: str, patches) -> Path:
    src = (FIX / f"{style}.py").read_text(encoding="utf-8")
    for old, new in patches:
        assert src.count(old) == 1, (style, old)
        src = src.replace(old, new)
    out = tmp_path / f"{style}_planted.py"
    out.write_text(src, encoding="utf-8")
    return out


def load(path: Path):
    name = f"learner_{path.stem}_{abs(hash(path.read_text()))}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def check(path: Path, **kw):
    return check_module(load(path), lang="en", **kw)


EXPECTED_KINDS = {
    "gpt_video": ["attention", "feed_forward", "block", "model"],
    "mingpt": ["attention", "feed_forward", "layer_norm", "block", "model"],
    "llama": ["attention", "feed_forward", "rms_norm", "block", "model"],
    "llama_cossin": ["attention", "feed_forward", "rms_norm", "block", "model"],
}


@pytest.mark.parametrize("style", STYLES)
def test_correct_file_of_each_new_style_exits_0_with_its_own_sizes(tmp_path, style):
    r = check(plant(tmp_path, style, []))
    assert r.exit_code == 0, r.text("en")
    assert [c.kind for c in r.components] == EXPECTED_KINDS[style]
    assert all(c.status == "ok" for c in r.components)
    assert r.bug_ids() == []
    assert "could not be checked" in r.text("en").splitlines()[-2]


def test_sizes_come_from_the_learners_constants_and_config(tmp_path):
    r = check(plant(tmp_path, "gpt_video", []))
    assert "d_model=64 (n_embd = 64 in your file)" in r.sizes and "heads=4 (n_head = 4 in your file)" in r.sizes
    r = check(plant(tmp_path, "mingpt", []))
    assert "d_model=48 (n_embd = 48 in GPTConfig())" in r.sizes
    r = check(plant(tmp_path, "llama", []))
    assert "kv_heads=2 (n_kv_heads = 2 in ModelArgs())" in r.sizes
    r = check(plant(tmp_path, "gpt_video", []), sizes={"n_embd": 32})
    assert r.exit_code == 0 and "d_model=32 (n_embd=32 from --size)" in r.sizes
    p = plant(tmp_path, "llama_cossin", [("DIM = 48\n", "DIM = 48\n# check: d_model=32\n")])
    r = check(p)
    assert r.exit_code == 0 and "d_model=32 (d_model=32 from # check:)" in r.sizes, r.text("en")


@pytest.mark.parametrize("style,bug,kind,patches", PLANTS, ids=[f"{p[1]}-{p[0]}" for p in PLANTS])
def test_planted_bug_in_the_new_styles_is_named_exactly(tmp_path, style, bug, kind, patches):
    r = check(plant(tmp_path, style, patches))
    assert r.exit_code == 1, r.text("en")
    got = {c.kind: c.ids for c in r.components}
    assert got[kind] == [bug], r.text("en")
    others = {k: v for k, v in got.items() if k != kind and v}
    assert others == {}, r.text("en")
    f = next(f for f in r.findings if f.id == bug)
    e = CATALOGUE[bug]
    assert (f.zh, f.en, f.severity, f.link) == (e.zh, e.en, "bug", f"docs/from-the-tutorials.md#{bug}")


def test_a_skipped_component_never_gives_exit_0():
    r = Report("x.py", lang="en")
    r.components = [Component("attention", "A", "ok"), Component("feed_forward", "F", "skipped", [], "why")]
    assert r.exit_code == 2
    lines = r.text("en").splitlines()
    assert lines[-2] == "1 checked, 1 could not be checked."
    assert "matches the reference" not in r.text("en")
    r.components[1].status = "ok"
    assert r.exit_code == 0 and r.text("en").splitlines()[-1] == "every component checked matches the reference."


def test_a_decoder_whose_cross_attention_reads_itself_is_never_exit_0(tmp_path):
    """The issue's case: cross-attention fed (h, h, h), a Sequential feed-forward, bool masks."""
    src = (FIX / "annotated.py").read_text(encoding="utf-8")
    assert src.count("self.src_attn(x, m, m, src_mask)") == 1
    r = check(plant(tmp_path, "annotated", [("self.src_attn(x, m, m, src_mask)", "self.src_attn(x, x, x, src_mask)")]))
    assert r.exit_code == 1 and "cross-attention-kv" in r.bug_ids(), r.text("en")


def test_a_todo_hint_is_printed_once_and_zh_detail_lines_are_chinese(tmp_path):
    skeleton = Path(__file__).resolve().parents[2] / "exercises" / "03_multihead.py"
    r = check(skeleton)
    text = r.text("zh")
    assert r.exit_code == 1 and text.count("TODO 03a") == 1, text
    r = check(plant(tmp_path, "gpt_video", []))
    zh = r.text("zh")
    assert "尺寸: d_model=64 (n_embd = 64 在你的文件里)" in zh
    assert "（每个头一个模块，按头拼接）" in zh and "（你自己的子层）" in zh
    assert zh.splitlines()[-2:] == ["4 个已检查，0 个无法检查。", "检查过的组件都与参考实现一致。"]


def test_a_size_less_parameter_takes_the_size_and_switch_its_call_sites_pass():
    from scratchformer.check.sizes import passed_sizes
    src = ("import torch.nn as nn\n"
           "class Att(nn.Module):\n    def __init__(self, k, heads=4, mask=False):\n        super().__init__()\n"
           "class Blk(nn.Module):\n    def __init__(self, k, heads=4, mask=False):\n"
           "        super().__init__()\n        self.a = Att(k, heads=heads, mask=mask)\n"
           "class Enc(nn.Module):\n    def __init__(self, k, mask=False):\n        super().__init__()\n"
           "        self.a = Att(k, mask=False)\n"
           "class Model(nn.Module):\n    def __init__(self, emb=32, depth=2):\n        super().__init__()\n"
           "        self.b = nn.Sequential(*[Blk(k=emb, heads=4, mask=True) for _ in range(depth)])\n"
           "        self.e = Enc(emb)\n")
    sizes, flags = passed_sizes(src)
    assert sizes == {("Blk", "k"): "d_model", ("Att", "k"): "d_model", ("Att", "heads"): "heads",
                     ("Enc", "k"): "d_model"}
    # Blk always gets mask=True; Att gets True through Blk and False from Enc: no one value, left to its default
    assert flags == {("Blk", "mask"): True}


_PRE_LN_INSIDE = '''import torch, torch.nn as nn, torch.nn.functional as F
d_model = 32
n_heads = 4
d_ff = 64


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model=d_model, n_heads=n_heads):
        super().__init__()
        self.h, self.norm = n_heads, nn.LayerNorm(d_model)
        self.q, self.k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.v, self.o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        y = self.norm(x)
        q = self.q(y).view(B, T, self.h, C // self.h).transpose(1, 2)  # (B, h, T, d_k)
        k = self.k(y).view(B, T, self.h, C // self.h).transpose(1, 2)
        v = self.v(y).view(B, T, self.h, C // self.h).transpose(1, 2)
        s = q @ k.transpose(-2, -1) / (C // self.h) ** 0.5
        if mask is not None:
            s = s.masked_fill(mask == 0, -1e9)
        return RESIDUAL_Aself.o((F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class FeedForward(nn.Module):
    def __init__(self, d_model=d_model, d_ff=d_ff):
        super().__init__()
        self.ln, self.w1, self.w2 = nn.LayerNorm(d_model), nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return RESIDUAL_Fself.w2(torch.relu(self.w1(self.ln(x))))
'''


@pytest.mark.parametrize("res_a,res_f,expect", [("x + ", "x + ", {}), ("", "x + ", {"attention": ["no-residual"]}),
                                                ("x + ", "", {"feed_forward": ["no-residual"]})])
def test_sublayers_holding_their_own_pre_ln_residual_are_checked_as_written(tmp_path, res_a, res_f, expect):
    p = tmp_path / f"pre_ln_inside_{len(res_a)}_{len(res_f)}.py"
    p.write_text(_PRE_LN_INSIDE.replace("RESIDUAL_A", res_a).replace("RESIDUAL_F", res_f), encoding="utf-8")
    r = check(p)
    assert {c.kind: c.ids for c in r.components if c.ids} == expect, r.text("en")
    assert [c.status for c in r.components if c.kind not in expect] == ["ok"] * (2 - len(expect))
    assert r.exit_code == (1 if expect else 0)
