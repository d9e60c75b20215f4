"""The oneDNN float32 path of `scratchformer.nn.linear` gives F.linear's numbers and gradients."""
import pytest
import torch
import torch.nn.functional as F

import scratchformer.nn.fast_linear as linear_mod
from scratchformer.nn import Encoder, TransformerConfig, linear, onednn_blocker, use_onednn

needs_kernel = pytest.mark.skipif(linear_mod._KERNEL is None, reason="no oneDNN linear in this torch build")


@pytest.fixture(autouse=True)
def _restore():
    previous = linear_mod._enabled
    yield
    linear_mod._enabled = previous


@needs_kernel
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layout", ["2d", "3d", "strided"])
def test_forward_and_grads_match_f_linear(bias, layout):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 10, 24, generator=g)
    if layout == "2d":
        x = x.reshape(60, 24)
    elif layout == "strided":
        x = x.transpose(0, 1)  # (10, 6, 24), not contiguous
    w = torch.randn(40, 24, generator=g)
    b = torch.randn(40, generator=g) if bias else None
    leaves = [t.clone().requires_grad_() for t in (x, w) + ((b,) if bias else ())]
    ref_leaves = [t.clone().requires_grad_() for t in (x, w) + ((b,) if bias else ())]
    out = linear(*leaves) if bias else linear(*leaves, None)
    assert onednn_blocker(x, w) is None
    ref = F.linear(*ref_leaves) if bias else F.linear(*ref_leaves, None)
    assert out.shape == ref.shape
    assert (out - ref).abs().max() < 1e-5
    grad = torch.randn(ref.shape, generator=g)
    out.backward(grad)
    ref.backward(grad)
    for ours, theirs in zip(leaves, ref_leaves):
        assert (ours.grad - theirs.grad).abs().max() < 1e-4 * max(1.0, theirs.grad.abs().max().item())


@needs_kernel
def test_no_grad_needed_for_frozen_weight():
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(3, 8)  # frozen
    linear(x, w).sum().backward()
    assert (x.grad - w.sum(0).expand(5, 8)).abs().max() < 1e-5


def test_blocker_reasons():
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    assert "float32" in onednn_blocker(x.double(), w.double()) or linear_mod._KERNEL is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert onednn_blocker(x, w) is not None
    if linear_mod._KERNEL is not None:
        use_onednn(False)
        assert "use_onednn(False)" in onednn_blocker(x, w)
        assert torch.equal(linear(x, w), F.linear(x, w))


@needs_kernel
def test_encoder_same_with_and_without_onednn():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0)
    enc = Encoder(cfg)
    x = torch.randn(3, 7, 32, requires_grad=True)
    mask = torch.arange(7)[None] < torch.tensor([7, 4, 2])[:, None]
    fast = enc(x, mask)
    fast_grad, = torch.autograd.grad(fast[mask].sum(), x)
    use_onednn(False)
    slow = enc(x, mask)
    slow_grad, = torch.autograd.grad(slow[mask].sum(), x)
    assert (fast - slow)[mask].abs().max() < 1e-5
    assert (fast_grad - slow_grad).abs().max() < 1e-4


def test_inference_kernel_rule_follows_the_cpu():
    """Each CPU kind gets the rules measured on it: MKL for every inference size on an Intel CPU
    and on an AVX2-only AMD one, oneDNN from 128 rows on an AMD CPU with AVX-512; the module's
    RULES are this machine's and the path taken says so."""
    assert linear_mod.rules_for("GenuineIntel", "AMX") is linear_mod.INTEL
    assert linear_mod.rules_for("GenuineIntel", "AVX2") is linear_mod.INTEL
    assert linear_mod.rules_for("AuthenticAMD", "AVX512") is linear_mod.AMD_AVX512
    assert linear_mod.rules_for("AuthenticAMD", "AVX2") is linear_mod.AMD_AVX2
    assert linear_mod.INTEL.onednn_min_rows == linear_mod.AMD_AVX2.onednn_min_rows == float("inf")
    assert linear_mod.AMD_AVX512.onednn_min_rows == 128
    rule = linear_mod.inference_min_rows()
    assert rule == linear_mod.RULES.onednn_min_rows
    if rule == float("inf"):
        assert linear_mod.inference_mkl_reason(3).endswith("MKL's sgemm is as fast or faster at every size")
    else:
        assert linear_mod.inference_mkl_reason(3).startswith("inference on fewer than 128 rows")
    if linear_mod._KERNEL is not None:
        x, w = torch.randn(600, 8), torch.randn(3, 8)  # 600 rows: beyond every transposed range
        with torch.inference_mode():
            linear(x, w)
        assert linear_mod.last_linear_path_reason == (None if rule <= 600 else linear_mod.inference_mkl_reason(600))


def test_transposed_layout_rule_and_numbers():
    """Few-row inference products with more outputs than inputs read a transposed copy of the
    weight (`transposed_wins`): same numbers as F.linear to float32 rounding; the copy is made
    once and made anew when the weight changes in place; `use_transposed(False)` turns it off."""
    amd, intel = linear_mod.AMD_AVX2, linear_mod.INTEL
    assert linear_mod.transposed_wins(768, 256, 1, amd) and linear_mod.transposed_wins(2000, 256, 32, amd)
    assert not linear_mod.transposed_wins(256, 1024, 1, amd)  # more inputs than outputs: F.linear
    assert not linear_mod.transposed_wins(768, 256, 33, amd)
    assert not linear_mod.transposed_wins(768, 256, 1, intel)  # MKL's AVX-512 code reads (out, in) well
    assert linear_mod.transposed_wins(256, 1024, 32, intel) and linear_mod.transposed_wins(768, 256, 128, intel)
    assert not linear_mod.transposed_wins(768, 256, 512, intel)  # a tie there: no second copy
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(16, 48)
    rows = max(6, linear_mod.RULES.transposed_min_rows)  # inside this CPU's transposed range
    x = torch.randn(2, rows // 2, 16, generator=g)
    with torch.inference_mode():
        out = linear(x, lin.weight, lin.bias)
        if linear_mod._KERNEL is not None:
            assert linear_mod.last_linear_path_reason == linear_mod.transposed_reason(rows)
        assert out.shape == (2, rows // 2, 48)
        assert (out - F.linear(x, lin.weight, lin.bias)).abs().max() < 1e-5
        first = linear_mod.transposed_copy(lin.weight)
        assert linear_mod.transposed_copy(lin.weight) is first  # made once
        assert torch.equal(first, lin.weight.t())
    with torch.no_grad():
        lin.weight.mul_(2.0)  # an in-place update (an optimizer step): the copy is stale
    again = linear_mod.transposed_copy(lin.weight)
    assert again is not first and torch.equal(again, lin.weight.t())
    # torch's fused AdamW and `.data` writes change a weight without moving its version counter
    opt = torch.optim.AdamW(lin.parameters(), lr=0.1, fused=True)
    lin.weight.grad, lin.bias.grad = torch.ones_like(lin.weight), torch.ones_like(lin.bias)
    version = lin.weight._version
    opt.step()
    assert lin.weight._version == version  # what made a stale copy (a translation run that decoded its init)
    fresh = linear_mod.transposed_copy(lin.weight)
    assert fresh is not again and torch.equal(fresh, lin.weight.t())
    lin.weight.data.add_(1.0)
    linear_mod.forget_transposed()
    assert torch.equal(linear_mod.transposed_copy(lin.weight), lin.weight.t())
    previous = linear_mod.use_transposed(False)
    try:
        with torch.inference_mode():
            linear(x, lin.weight, lin.bias)
        assert linear_mod.last_linear_path_reason != linear_mod.transposed_reason(rows)
    finally:
        linear_mod.use_transposed(previous)


def test_row_projection_reads_columns_of_one_transposed_copy():
    """`row_projection` (W_Q, or [W_K; W_V] of a fused qkv) slices the columns of the whole
    weight's transposed copy (a strided view) and gives F.linear's numbers on those rows."""
    g = torch.Generator().manual_seed(1)
    qkv = torch.nn.Linear(8, 24)
    rows = max(3, linear_mod.RULES.transposed_min_rows)  # inside this CPU's transposed range
    x = torch.randn(rows, 1, 8, generator=g)
    with torch.inference_mode():
        for start, stop in ((0, 8), (8, None)):
            proj = linear_mod.row_projection(qkv, start, stop, x, rows=rows)
            ref = F.linear(x, qkv.weight[start:stop], qkv.bias[start:stop])
            assert (proj(x) - ref).abs().max() < 1e-5
        assert linear_mod.transposed_wins(16, 8, rows)  # [W_K; W_V] (16, 8) takes the transposed copy
        assert qkv.weight in linear_mod._TRANSPOSED  # one copy of the whole weight, sliced


_SHAPES_SCRIPT = """
import json, sys, torch
import scratchformer.nn.fast_linear as fl  # sets the cache capacities unless the environment did

def rss():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) // 1024

torch.manual_seed(0)
net = torch.nn.Sequential(fl.Linear(32, 96), torch.nn.ReLU(), fl.Linear(96, 32))
def step(rows):
    net(torch.randn(rows, 32)).square().sum().backward()
step(640)
before = rss()
for rows in range(704, 704 + 64 * 40, 64):  # 40 shapes, each new: forward and both backward products
    step(rows)
print(json.dumps({"grew": rss() - before, "path": fl.last_linear_path_reason}))
"""


@needs_kernel
@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads the RSS of a Linux process")
def test_onednn_caches_are_capped_so_new_shapes_do_not_grow_memory_without_bound():
    """oneDNN and ideep keep every compiled product shape in caches of 1,024 entries: training on
    lengths that vary grew the RSS by hundreds of MB (nn/fast_linear.py). Importing scratchformer
    caps both at ONEDNN_CACHE_CAPACITY unless the environment sets them; the same run with the
    library defaults shows the growth the cap avoids (so the check cannot pass by measuring nothing)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    def grew(**env) -> int:
        clean = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")}
        src = str(Path(linear_mod.__file__).resolve().parents[2])
        out = subprocess.run([sys.executable, "-c", _SHAPES_SCRIPT], capture_output=True, text=True, check=True,
                             env={**clean, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", **env})
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["path"] is None  # the products ran on oneDNN
        return got["grew"]

    uncapped, capped = grew(ONEDNN_PRIMITIVE_CACHE_CAPACITY="1024", LRU_CACHE_CAPACITY="1024"), grew()
    if uncapped < 30:
        pytest.skip(f"the library defaults grew only {uncapped} MB on this CPU: nothing to tell apart")
    assert capped < uncapped / 2, (capped, uncapped)
