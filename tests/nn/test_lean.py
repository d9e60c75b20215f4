"""The lean decoding step (nn/lean.py) equals the readable path: logits within 1e-5 at every
step, for the encoder-decoder (Post-LN and Pre-LN, ragged sources) and the GPT stack (RoPE,
learned positions, GQA); the preallocated KV cache writes in place; `lean_blocker` says why."""
import pytest
import torch


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py

from scratchformer.models.language_model import DecoderLM, LMConfig
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
from scratchformer.nn import KVCache, TransformerConfig

TOL = 1e-5  # float32, other kernel choices (no mask vs an all-True mask, oneDNN vs F.linear)


def _seq2seq(norm_first: bool, seed: int = 0) -> Seq2Seq:
    torch.manual_seed(seed)
    tc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1, norm_first=norm_first)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=40, tgt_vocab_size=45, transformer=tc)).eval()


def _ragged_src() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(5, 40, (3, 7), generator=g)
    src[1, 3:] = 0  # padded sources: the cross-attention mask matters
    src[2, 5:] = 0
    return src


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_seq2seq_lean_step_logits_equal_the_cached_decode(norm_first):
    model, src = _seq2seq(norm_first), _ragged_src()
    memory, mask = model.encode(src)
    cache = model.new_cache()
    step = model.lean_step(memory, mask, capacity=6)
    tokens = torch.tensor([[2, 9, 17, 11, 30, 6]] * 3)  # (B, 6): <bos> and five more
    worst = 0.0
    for t in range(tokens.shape[1]):
        want = model.decode(tokens[:, t:t + 1], memory, mask, cache=cache)[:, -1]  # (B, V)
        got = step(tokens[:, t])
        worst = max(worst, float((got - want).abs().max()))
    assert worst < TOL
    assert step.cache.length == cache.length == 6


@torch.no_grad()
def test_seq2seq_lean_step_follows_select_like_the_cache():
    model, src = _seq2seq(False), _ragged_src()
    memory, mask = model.encode(src)
    cache, step = model.new_cache(), model.lean_step(memory, mask, capacity=4)
    tok = torch.tensor([2, 2, 2])
    model.decode(tok[:, None], memory, mask, cache=cache)
    step(tok)
    keep = torch.tensor([2, 0])  # sentence 1 leaves, the others swap
    cache.reorder(keep)
    memory, mask = memory[keep], mask[keep]
    step.select(keep)
    nxt = torch.tensor([7, 8])
    want = model.decode(nxt[:, None], memory, mask, cache=cache)[:, -1]
    assert float((step(nxt) - want).abs().max()) < TOL


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_beam_step_keeps_one_memory_per_sentence(norm_first):
    """beams=K over the n sentences' memory == the readable decode over K copies of it, also
    after beams are reordered inside their sentence and after a sentence leaves."""
    K = 3
    model, src = _seq2seq(norm_first), _ragged_src()
    memory, mask = model.encode(src)  # (3, S, C)
    step = model.lean_step(memory, mask, capacity=5, beams=K)
    assert step.cache.cross_attn[0].get()[0].shape[0] == 3  # one memory K/V per sentence
    mem_k, mask_k = memory.repeat_interleave(K, 0), mask.repeat_interleave(K, 0)  # (9, S, C)
    cache = model.new_cache()
    g = torch.Generator().manual_seed(3)
    worst = 0.0
    for t in range(4):
        tok = torch.randint(5, 45, (mem_k.shape[0],), generator=g)
        want = model.decode(tok[:, None], mem_k, mask_k, cache=cache)[:, -1]
        worst = max(worst, float((step(tok) - want).abs().max()))
        n = mem_k.shape[0] // K
        rows = (torch.arange(n)[:, None] * K + torch.randint(0, K, (n, K), generator=g)).view(-1)  # in-sentence
        sentences = None
        if t == 2:  # sentence 1 leaves
            keep = torch.tensor([0, 2])
            rows = rows.view(n, K)[keep].view(-1)
            sentences = keep
        cache.reorder(rows)
        mem_k, mask_k = mem_k[rows], mask_k[rows]
        step.select(rows, sentences)
    assert worst < TOL
    assert step.cache.cross_attn[0].get()[0].shape[0] == 2


def test_kv_cache_reorder_copies_the_filled_positions_into_its_spare_buffer():
    cache = KVCache(capacity=6)
    k = torch.randn(4, 2, 3, 5)
    cache.update(k, -k)
    first = cache._k.data_ptr()
    index = torch.tensor([3, 3, 0, 1])
    cache.reorder(index)
    second = cache._k.data_ptr()
    assert second != first
    keys, values = cache.update(k[:, :, :1] + 1, k[:, :, :1])  # written in place after the reorder
    assert torch.equal(keys[:, :, :3], k[index]) and torch.equal(values[:, :, :3], -k[index])
    assert torch.equal(keys[:, :, 3:], k[:, :, :1] + 1)
    cache.reorder(torch.tensor([1, 2]))  # fewer rows: back into the first buffer, no allocation
    assert cache._k.data_ptr() == first and cache._k.shape == (2, 2, 6, 5)
    keys, _ = cache.get()
    assert torch.equal(keys[:, :, :3], k[index][[1, 2]])


@pytest.mark.parametrize("position,n_kv_heads", [("rope", None), ("learned", None), ("rope", 2)])
@torch.no_grad()
def test_lm_lean_step_logits_equal_the_cached_forward(position, n_kv_heads):
    torch.manual_seed(0)
    tc = TransformerConfig(d_model=32, n_heads=4, n_kv_heads=n_kv_heads, d_ff=64, n_layers=2, dropout=0.0,
                           activation="gelu", norm_first=True, position=position, max_len=32)
    model = DecoderLM(LMConfig(vocab_size=30, transformer=tc)).eval()
    ids = torch.randint(5, 30, (2, 12))
    caches, ref = model.new_caches(16), model.new_caches()
    model(ids[:, :4], caches)
    model(ids[:, :4], ref)
    step = model.lean_step(caches)
    worst = 0.0
    for t in range(4, 12):
        want = model(ids[:, t:t + 1], ref)[:, -1]
        worst = max(worst, float((step(ids[:, t]) - want).abs().max()))
    assert worst < TOL
    full = model(ids)[:, -1]  # and the last step equals a full forward
    assert float((want - full).abs().max()) < 1e-4


def test_kv_cache_with_capacity_allocates_once_and_writes_in_place():
    cache = KVCache(capacity=8)
    k = torch.randn(2, 3, 1, 4)
    cache.update(k, k)
    ptr = cache._k.data_ptr()
    for t in range(7):
        keys, _ = cache.update(k + t, k + t)
        assert cache._k.data_ptr() == ptr  # no reallocation, no concatenation
    assert keys.shape == (2, 3, 8, 4) and torch.equal(keys[:, :, -1:], k + 6)
    keys, _ = cache.update(k, k)  # past the capacity: grows (doubling) instead of failing
    assert keys.shape[2] == 9 and cache._k.data_ptr() != ptr


def test_lean_blocker_says_why():
    model = _seq2seq(False)
    assert model.lean_blocker() is None
    model.train()
    assert model.lean_blocker() == "the stack is in training mode (dropout is on): the lean step is for inference"
    model.eval()
    model.transformer.decoder.set_window(4)
    assert model.lean_blocker() == "windowed attention keeps a rolling cache: the readable path serves it"
