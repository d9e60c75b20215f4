"""The lean search (tensor bookkeeping over beam x batch + the lean step) returns exactly the
readable search's hypotheses: identical tokens, the same `finished` flags, scores within 1e-5,
for greedy and beam 4, batch 1 and a batch of ragged sources, Post-LN and Pre-LN, both stopping
rules and several length penalties, single models and ensembles; and LM generation gives the
same tokens with and without the lean step."""
import itertools

import pytest
import torch


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py

from scratchformer.data.tokenizers import EOS_ID
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig, Seq2SeqEnsemble
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.translate.decoding import DecodeConfig, _LeanStepper, decode

# Scores are sums of up to ~20 float32 log-probs; the lean step computes them with other kernels
# (beam search: a sentence's K hypotheses attend its memory as K queries of one attention call),
# so they agree to float32 rounding of those sums (1.2e-6 seen at |score| ~ 12), not bit for bit.
SCORE_TOL = 1e-5


def _model(norm_first: bool, seed: int, eos_boost: float) -> Seq2Seq:
    torch.manual_seed(seed)
    tc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, norm_first=norm_first)
    m = Seq2Seq(Seq2SeqConfig(src_vocab_size=50, tgt_vocab_size=60, transformer=tc)).eval()
    with torch.no_grad():  # a random model that ends some hypotheses early and others not at all
        m.tgt_embed.tokens.weight[EOS_ID] *= eos_boost
    return m


def _sources(batch: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(batch)
    src = torch.randint(5, 50, (batch, 9), generator=g)
    if batch > 1:
        src[1, 4:] = 0  # ragged: right-padded sources of other lengths
        src[-1, 6:] = 0
    return src


def _same(a, b) -> None:
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.finished for h in a] == [h.finished for h in b]
    assert max(abs(x.score - y.score) for x, y in zip(a, b)) < SCORE_TOL
    assert max(abs(x.normalized - y.normalized) for x, y in zip(a, b)) < SCORE_TOL


# (early stop, length penalty, output limit offset): both stopping rules, raw / normalised /
# negative-penalty ranking, and a short limit so that some hypotheses are cut off there
SETTINGS = [(True, 1.0, 4), (False, 1.0, 4), (False, -0.5, 4), (True, 0.0, 1)]


@pytest.mark.parametrize("norm_first,seed,boost", [(False, 1, 2.0), (True, 0, 1.5)])
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("batch", [1, 6])
def test_lean_search_equals_readable_search(norm_first, seed, boost, beam, batch):
    model, src = _model(norm_first, seed, boost), _sources(batch)
    assert _LeanStepper(model, src, 4).reasons == [None]  # the lean step really runs
    for early_stop, lp, offset in SETTINGS:
        cfg = DecodeConfig(beam=beam, early_stop=early_stop, length_penalty=lp, max_len_offset=offset)
        _same(decode(model, src, cfg), decode(model, src, cfg.replace(lean=False)))


def test_lean_search_sees_both_endings():
    """The grid above covers hypotheses that end with <eos> and ones cut at the length limit."""
    ends = {(beam, h.finished) for beam in (1, 4)
            for h in decode(_model(False, 1, 2.0), _sources(6), DecodeConfig(beam=beam, max_len_offset=1))}
    assert ends == {(1, True), (1, False), (4, True), (4, False)}


@pytest.mark.parametrize("beam", [1, 4])
def test_lean_search_equals_readable_for_an_ensemble(beam):
    ens = Seq2SeqEnsemble([_model(False, 0, 4.0), _model(True, 1, 5.0)]).eval()
    src = _sources(6)
    cfg = DecodeConfig(beam=beam)
    _same(decode(ens, src, cfg), decode(ens, src, cfg.replace(lean=False)))


def test_lean_search_falls_back_to_decode_and_says_why():
    model = _model(False, 0, 4.0)
    model.transformer.decoder.set_window(3)
    src = _sources(6)
    assert _LeanStepper(model, src, 4).reasons == [
        "windowed attention keeps a rolling cache: the readable path serves it"]
    cfg = DecodeConfig(beam=4)
    _same(decode(model, src, cfg), decode(model, src, cfg.replace(lean=False)))


def test_lm_generation_lean_equals_readable():
    from scratchformer.models.language_model import DecoderLM, LMConfig
    from scratchformer.tasks.lm import LanguageModel, LMDataConfig, LMRecipe

    torch.manual_seed(0)
    tc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, activation="gelu",
                           norm_first=True, position="rope", max_len=24)
    cfg = LMConfig(vocab_size=40, transformer=tc)
    lm = LanguageModel(DecoderLM(cfg), None, LMRecipe(data=LMDataConfig(context=24), model=cfg))
    prompt = list(range(6, 16))
    for temperature in (0, 0.9):  # greedy and sampled (same seed), past the window (a crop)
        lean = lm.generate_ids(prompt, 30, temperature=temperature, seed=0)
        readable = lm.generate_ids(prompt, 30, temperature=temperature, seed=0, lean=False)
        assert lean == readable and len(lean) == 30


def test_auto_precision_chooses_by_a_probe_and_says_why():
    from scratchformer.tasks.translate.decoding import BF16_MIN_GAIN, choose_precision

    from scratchformer.nn.compute import bf16_units

    choice, why = choose_precision(32, 64)
    assert choice in ("fp32", "bf16")
    if not bf16_units()[0]:  # no bf16 matrix units: fp32 without timing (tests/tasks/test_compute_type.py)
        assert choice == "fp32" and "no bf16 matrix units" in why
        return
    gain = float(why.split("bf16 ")[1].split("x")[0])
    assert (choice == "bf16") == (gain >= BF16_MIN_GAIN)  # the rule it states is the rule it applied
    assert why.startswith("probe at 32 rows x d_model 64: ")
    assert choose_precision(32, 64) == (choice, why)  # probed once per size bucket


def test_compiled_lean_step_gives_the_eager_hypotheses():
    """`DecodeConfig(compile=True)`: torch.compile (Inductor) traces the lean step (the oneDNN
    projection is a custom op with a fake implementation, nn/fast_linear.py) and decodes the
    same tokens as eager, greedy and beam 4, over a ragged batch whose sentences finish at
    different steps (shapes change as they leave: recompiles, not errors)."""
    from torch._dynamo.utils import counters

    model, src = _model(False, 1, 2.0), _sources(6)
    for beam in (1, 4):
        cfg = DecodeConfig(beam=beam, max_len_offset=4)
        with torch.inference_mode():
            _same(decode(model, src, cfg.replace(compile=True)), decode(model, src, cfg))
    assert counters["stats"]["unique_graphs"] >= 1  # Inductor graphs really ran
