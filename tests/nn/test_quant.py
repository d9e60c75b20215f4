"""int8 projections (nn/quant.py): each within 3% of float32 (relative to the output's largest
value), a whole translator's logits within 0.1 of float32 and its lean and readable searches
still identical; a bad `quantize=` is a one-line UserError."""
import pytest
import torch

from scratchformer.errors import UserError
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
from scratchformer.nn import Linear, TransformerConfig
from scratchformer.nn.quant import Int8Linear, check_quantize, quantize_int8
from scratchformer.tasks.translate.decoding import DecodeConfig, decode


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py


def test_int8_linear_is_within_3_percent_and_serves_row_blocks():
    torch.manual_seed(0)
    lin = Linear(64, 96)
    x = torch.randn(5, 3, 64)
    q = Int8Linear.from_linear(lin)
    with torch.no_grad():
        ref = lin(x)
        assert float((q(x) - ref).abs().max() / ref.abs().max()) < 0.03
        rows = q.rows(32, 64)  # a block of rows (W_K of a fused qkv): its own int8 weight
        assert float((rows(x) - ref[..., 32:64]).abs().max() / ref.abs().max()) < 0.03
        assert q.rows(32, 64) is rows


def _model() -> Seq2Seq:
    torch.manual_seed(0)
    tc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=40, tgt_vocab_size=45, transformer=tc)).eval()


@torch.no_grad()
def test_int8_translator_logits_within_tolerance_and_lean_equals_readable():
    fp32, int8 = _model(), quantize_int8(_model())
    assert not any(isinstance(m, torch.nn.Linear) for m in int8.modules())
    src = torch.randint(5, 40, (4, 7))
    tgt = torch.randint(5, 45, (4, 6))
    diff = (int8(src, tgt) - fp32(src, tgt)).abs().max()
    assert 0 < float(diff) < 0.1  # quantized (not equal) but close
    cfg = DecodeConfig(beam=4)
    a, b = decode(int8, src, cfg), decode(int8, src, cfg.replace(lean=False))
    assert [h.tokens for h in a] == [h.tokens for h in b]


def test_bad_quantize_is_a_user_error():
    assert check_quantize(None) == "none"
    with pytest.raises(UserError, match="^quantize must be one of none, int8, got 'int4'$"):
        check_quantize("int4")


def test_activation_bits_chooses_8_only_where_it_is_clearly_more_accurate():
    """The rule on the two probe errors (the AVX2 saturation and the VNNI numbers of the module
    doc), and the probe on this CPU: its choice is the one with the smaller measured error, and
    every Int8Linear built here uses it."""
    from scratchformer.nn.quant import activation_bits, full_range_wins

    assert not full_range_wins(error_7bit=0.018, error_8bit=0.15)  # AVX2: 16-bit sums saturate
    assert full_range_wins(error_7bit=0.019, error_8bit=0.011)  # VNNI: 32-bit sums
    assert not full_range_wins(error_7bit=0.019, error_8bit=0.017)  # a near-tie keeps 7 bits
    bits, why = activation_bits()
    assert bits in (7, 8) and f"-> {bits} bits" in why
    errors = [float(e.rstrip("%")) for e in why.replace(",", "").split() if e.endswith("%")]
    assert (errors[0] < errors[1]) == (bits == 8)  # 8-bit error first, then 7-bit
    assert Int8Linear(torch.randn(8, 4), None).reduce_range == (bits == 7)


def test_wide_engine_packing_serves_many_rows_within_tolerance():
    """Where the probe picked a second engine for many-row products, an Int8Linear keeps a second
    packing and uses it from WIDE_MIN_ROWS rows; both sizes stay within 3% of float32, and the
    choice follows the stated rule on the probe's own gain."""
    from scratchformer.nn import quant

    engine, why = quant.wide_engine()
    import re

    m = re.search(r" ([0-9.]+)x the speed", why)
    if m is not None:
        gain = float(m.group(1))
        assert (engine is not None) == (gain >= quant.WIDE_MIN_GAIN)
    torch.manual_seed(0)
    lin = Linear(64, 96)
    q = Int8Linear.from_linear(lin)
    assert (q._packed_wide is not None) == (engine is not None)
    with torch.no_grad():
        for rows in (quant.WIDE_MIN_ROWS - 1, quant.WIDE_MIN_ROWS, 4 * quant.WIDE_MIN_ROWS):
            x = torch.randn(rows, 64)
            ref = lin(x)
            assert float((q(x) - ref).abs().max() / ref.abs().max()) < 0.03
