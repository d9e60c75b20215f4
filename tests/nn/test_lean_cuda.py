"""The fast paths on CUDA (skipped on a CPU-only machine, with the reason): the lean decoding
step under fp16/bf16 autocast and fp32 equals the readable path there too. int8 (`nn/quant.py`)
is CPU-only: on CUDA `quantize_int8` refuses with a one-line UserError (torch's dynamic-quantized
linear has no CUDA kernel)."""
import pytest
import torch

from scratchformer.errors import UserError
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.translate.decoding import DecodeConfig, decode

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (no GPU on this machine)")


def _model() -> Seq2Seq:
    torch.manual_seed(0)
    tc = TransformerConfig(d_model=64, n_heads=4, d_ff=128, n_layers=2, dropout=0.0)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=50, tgt_vocab_size=60, transformer=tc)).eval().cuda()


@needs_cuda
@pytest.mark.parametrize("dtype", [None, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("beam", [1, 4])
def test_lean_search_equals_readable_on_cuda(dtype, beam):
    model = _model()
    src = torch.randint(5, 50, (5, 9), device="cuda")
    src[1, 4:] = 0
    cfg = DecodeConfig(beam=beam)
    with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
        lean, readable = decode(model, src, cfg), decode(model, src, cfg.replace(lean=False))
    assert [h.tokens for h in lean] == [h.tokens for h in readable]
    tol = 1e-4 if dtype is None else 5e-2
    assert max(abs(a.score - b.score) for a, b in zip(lean, readable)) < tol


@needs_cuda
@torch.no_grad()
def test_lean_step_logits_equal_cached_decode_on_cuda():
    model = _model()
    src = torch.randint(5, 50, (3, 7), device="cuda")
    memory, mask = model.encode(src)
    cache, step = model.new_cache(), model.lean_step(memory, mask, capacity=5)
    tok = torch.full((3,), 2, device="cuda")
    for t in range(5):
        want = model.decode(tok[:, None], memory, mask, cache=cache)[:, -1]
        got = step(tok)
        assert float((got - want).abs().max()) < 1e-4
        tok = got.argmax(-1)


@needs_cuda
def test_int8_on_cuda_is_a_user_error():
    from scratchformer.nn.quant import quantize_int8

    with pytest.raises(UserError, match="^int8 quantization runs on the CPU only"):
        quantize_int8(_model())
