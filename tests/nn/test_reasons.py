"""Why a fast path was not taken is a value of each call (nn/reasons.py), never state on a shared
module: one model called from two threads with different inputs, each call reads its own reason
(a reason stored on the module would be the other thread's about half the time)."""
import threading
import warnings

import pytest
import torch

from scratchformer.nn import Encoder, MultiHeadAttention, TransformerConfig, path_reasons

ROUNDS = 40


def _in_two_threads(calls):
    """Run `calls[0]` and `calls[1]` ROUNDS times each, in two threads stepping together (a
    barrier before every call, so the calls overlap); returns what each call returned."""
    barrier, got, errors = threading.Barrier(2), [[], []], []

    def worker(i):
        try:
            for _ in range(ROUNDS):
                barrier.wait()
                got[i].append(calls[i]())
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return got


def test_one_attention_from_two_threads_each_call_gets_its_own_fused_reason():
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 7, 32)

    def call(need_weights):
        def one():
            with torch.no_grad(), path_reasons() as why:
                mha(x, need_weights=need_weights)
            return why.of(mha)
        return one

    weights, plain = _in_two_threads([call(True), call(False)])
    assert len(weights) == len(plain) == ROUNDS
    assert all(len(r) == 1 and r[0] is not None and "need_weights" in r[0] for r in weights)
    assert all(r == [None] for r in plain)


def test_one_windowed_encoder_from_two_threads_each_call_gets_its_own_window_reason():
    torch.manual_seed(0)
    enc = Encoder(TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, window=5)).eval()
    long, short = torch.randn(1, 23, 32), torch.randn(1, 4, 32)

    def call(x):
        def one():
            with torch.no_grad(), path_reasons() as why:
                enc(x)
            return [r for _, r in why.window]
        return one

    blocked, one_block = _in_two_threads([call(long), call(short)])
    assert all(r == [None, None] for r in blocked)  # both layers ran the blocked window
    assert all(len(r) == 2 and all("one block" in x for x in r) for r in one_block)


def test_outside_a_record_nothing_is_kept_and_records_nest():
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(1, 3, 16)
    mha(x, need_weights=True)  # no record open: the call is not slowed by anyone's bookkeeping
    with path_reasons() as outer:
        mha(x)
        with path_reasons() as inner:
            mha(x, need_weights=True)
        mha(x)
    assert outer.of(mha) == [None, None] and len(inner.of(mha)) == 1 and "need_weights" in inner.of(mha)[0]


def test_the_old_spellings_warn_read_only_and_give_this_threads_last_reason():
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(1, 3, 16)
    mha(x, need_weights=True)
    with pytest.warns(DeprecationWarning, match=r"MultiHeadAttention\.last_path_reason is deprecated .*"
                                                r"path_reasons\(\)"):
        assert "need_weights" in mha.last_path_reason
    other = []
    t = threading.Thread(target=lambda: (mha(x), other.append(_quiet(lambda: mha.last_path_reason))))
    t.start()
    t.join()
    assert other == [None]  # the other thread's call: its own reason
    assert "need_weights" in _quiet(lambda: mha.last_path_reason)  # this thread's is unchanged
    with pytest.warns(DeprecationWarning, match="last_window_reason is deprecated"):
        assert mha.last_window_reason is None
    with pytest.raises(AttributeError):
        mha.last_path_reason = "set by hand"


def _quiet(read):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return read()
