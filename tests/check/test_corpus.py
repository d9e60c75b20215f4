"""The mutation corpus (issue 51, item 7): correct learner files in eighteen styles and more correct
variants, and one mutant per (style, bug id, realisation), in tests/check/corpus/.

- The sanity tests need no checker: every correct file runs its probe, every edit applies exactly
  once, every mutant runs and changes the numbers of its file (same seed, same weights, same
  input), every bug id is planted in at least two styles.
- The figure tests run the checker in process on every file (`check_loaded`) and assert recall of
  the planted ids >= 90% over the mutants, precision of the named bug ids >= 95% over all files,
  and exit 0 for every correct file. `scripts/check_corpus.py` measures the same and writes
  benchmarks/results/check_corpus.{json,md}."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

CORPUS = Path(__file__).resolve().parent / "corpus"
_spec = importlib.util.spec_from_file_location("scratchformer_corpus_measure", CORPUS / "measure.py")
_measure = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _measure  # dataclasses look their module up there
_spec.loader.exec_module(_measure)
figures, import_source, load_sibling, run_all = (_measure.figures, _measure.import_source, _measure.load_sibling,
                                                 _measure.run_all)

MUT = load_sibling("mutations")
PROBES = load_sibling("probes")

# the variants run through the probe of the style whose interface they keep
VARIANT_PROBE = PROBES.VARIANT_PROBE

ISSUE_51_IDS = {"layernorm-wrong-axis", "eps-outside-sqrt", "post-ln-residual", "extra-final-norm",
                "missing-final-norm", "rope-pairing", "rope-wrong-positions", "rmsnorm-eps-outside",
                "rmsnorm-mean-not-square", "gqa-repeat-wrong", "swiglu-wrong-gate", "kv-cache-mask-offset",
                "attention-dropout-in-eval", "weights-not-loaded", "target-not-shifted", "loss-on-padding"}
TODAY_IDS = {"missing-scale", "wrong-scale", "mask-fill-zero", "mask-inverted", "softmax-dim", "heads-not-transposed",
             "heads-merge-order", "unbiased-std", "pe-not-buffer", "pe-wrong-formula", "no-residual",
             "ffn-no-activation", "no-causal-mask", "cross-attention-kv"}


def _probe(style: str, source: str, tmp_path, stem: str):
    module, _ = import_source(source, str(tmp_path), stem)
    try:
        return PROBES.PROBES[style](module)
    finally:
        sys.modules.pop(module.__name__, None)


# ---------------------------------------------------------------- the corpus itself (no checker)
def test_the_corpus_has_its_size():
    styles, variants = MUT.style_names(), MUT.variant_names()
    sizes = (len(styles), len(variants), len(MUT.MUTATIONS))
    assert sizes[0] >= 8 and sizes[1] >= 30 and sizes[2] >= 200, sizes
    assert len({m.name for m in MUT.MUTATIONS}) == len(MUT.MUTATIONS)
    assert set(PROBES.PROBES) == set(styles)
    assert set(VARIANT_PROBE) == set(variants)


def test_the_corpus_plants_the_30_ids_each_in_two_styles_at_least():
    planted: dict[str, set] = {}
    for m in MUT.MUTATIONS:
        planted.setdefault(m.bug_id, set()).add(m.style)
    assert set(planted) == ISSUE_51_IDS | TODAY_IDS
    assert {i: s for i, s in planted.items() if len(s) < 2} == {}


@pytest.mark.parametrize("style", MUT.style_names())
def test_a_correct_style_file_runs(style, tmp_path):
    out = _probe(style, MUT.style_source(style), tmp_path, style)
    bad = [k for k, v in out.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and torch.isnan(v).any()]
    assert bad == []


@pytest.mark.parametrize("variant", MUT.variant_names())
def test_a_correct_variant_runs(variant, tmp_path):
    source = (MUT.VARIANTS / f"{variant}.py").read_text(encoding="utf-8")
    out = _probe(VARIANT_PROBE[variant], source, tmp_path, variant)
    bad = [k for k, v in out.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and torch.isnan(v).any()]
    assert bad == []


@pytest.mark.parametrize("style", MUT.style_names())
def test_every_mutant_changes_the_numbers_of_its_file(style, tmp_path):
    base = _probe(style, MUT.style_source(style), tmp_path, style)
    same, raised = [], []
    for m in (m for m in MUT.MUTATIONS if m.style == style):
        try:
            out = _probe(style, MUT.apply(m), tmp_path, m.name.replace("-", "_"))
        except Exception as e:  # a mutant must run: a learner's silent bug, not a crash
            raised.append(f"{m.name}: {type(e).__name__}: {e}"[:200])
            continue
        if not PROBES.differs(base, out):
            same.append(m.name)
    assert (same, raised) == ([], [])


@pytest.mark.parametrize("variant", PROBES.NUMERIC_TWINS)
def test_a_variant_that_only_rewrites_its_style_gives_its_numbers(variant, tmp_path):
    style = VARIANT_PROBE[variant]
    base = _probe(style, MUT.style_source(style), tmp_path, style)
    out = _probe(style, (MUT.VARIANTS / f"{variant}.py").read_text(encoding="utf-8"), tmp_path, variant)
    assert PROBES.close(base, out) == []


@pytest.mark.parametrize("style", ["llama_cn", "llama_hf", "llama_minimind"])
def test_the_kv_cache_of_a_correct_llama_file_gives_the_full_forward(style, tmp_path):
    out = _probe(style, MUT.style_source(style), tmp_path, style)
    torch.testing.assert_close(out["prefill"], out["full"][:, :6], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out["chunk"], out["full"][:, 6:9], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out["step"], out["full"][:, 9:10], atol=1e-5, rtol=1e-4)


def test_the_d2l_decoder_block_step_by_step_gives_its_training_forward(tmp_path):
    out = _probe("d2l", MUT.style_source("d2l"), tmp_path, "d2l")
    torch.testing.assert_close(out["dec_steps"], out["dec_train"], atol=1e-5, rtol=1e-4)


def test_the_sequence_first_attention_equals_torch_multihead_attention(tmp_path):
    m, _ = import_source(MUT.style_source("seq_first"), str(tmp_path), "seq_first_ref")
    torch.manual_seed(0)
    mine = m.MultiheadAttention(32, 4).eval()
    ref = torch.nn.MultiheadAttention(32, 4).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight]))
        ref.in_proj_bias.copy_(torch.cat([mine.q_proj.bias, mine.k_proj.bias, mine.v_proj.bias]))
        ref.out_proj.weight.copy_(mine.out_proj.weight)
        ref.out_proj.bias.copy_(mine.out_proj.bias)
    x = torch.randn(6, 2, 32)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[0, 4:] = True
    causal = m.generate_square_subsequent_mask(6)
    torch.testing.assert_close(mine(x, x, x, causal, pad), ref(x, x, x, attn_mask=causal, key_padding_mask=pad)[0],
                               atol=1e-6, rtol=1e-5)
    sys.modules.pop(m.__name__, None)


def test_an_edit_that_does_not_occur_once_is_refused():
    m = MUT.Mutation("gpt_video", "no-residual", "x = x +", "x =")  # occurs more than once
    with pytest.raises(ValueError, match="occurs 2 times"):
        MUT.apply(m)


# ---------------------------------------------------------------- the checker on the corpus
@pytest.fixture(scope="module")
def measured():
    return figures(run_all())


def test_recall_of_the_planted_ids_is_at_least_90_percent(measured):
    assert measured.recall >= 0.90, f"recall {measured.recall:.1%}; misses: {measured.misses[:20]}"


def test_precision_of_the_named_ids_is_at_least_95_percent(measured):
    assert measured.precision >= 0.95, f"precision {measured.precision:.1%}; false: {measured.false_findings[:20]}"


def test_every_correct_file_exits_0(measured):
    assert measured.correct_failing == []
