"""Smoke test of `benchmarks/`: every benchmark runs at toy sizes in seconds and writes JSON
of the expected shape plus Markdown. No timing is asserted (the numbers are meaningless at
these sizes); what is checked is that `make bench` cannot break unnoticed."""
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level package beside src/

from benchmarks import common, encoder, run_all  # noqa: E402

MACHINE_KEYS = {"date", "cpu_model", "cpu_capability", "threads", "torch"}
TARGET_KEYS = {"name", "value", "goal", "unit", "met"}
SUMMARY_KEYS = {"median", "min", "max", "n"}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # shared CI/dev cores: one thread avoids oversubscription stalls
    try:
        res = run_all.run_all(quick=True, out_dir=out, log=lambda *a: None)
    finally:
        torch.set_num_threads(threads)
    return out, res


def _load(out, name):
    data = json.loads((out / f"{name}.json").read_text())
    assert data["schema"] == common.SCHEMA_VERSION and data["benchmark"] == name
    assert MACHINE_KEYS <= set(data["machine"])
    for t in data["targets"]:
        assert TARGET_KEYS <= set(t)
    assert (out / f"{name}.md").read_text().startswith("# ")
    return data


def _is_summary(s):
    return SUMMARY_KEYS <= set(s) and s["min"] <= s["median"] <= s["max"]


def test_every_benchmark_writes_json_and_markdown(results):
    out, res = results
    assert set(res) == set(run_all.ORDER)
    readme = (out / "README.md").read_text()
    assert "CPU:" in readme and "get_cpu_capability" in readme and "threads" in readme
    for name in run_all.ORDER:
        _load(out, name)


def test_encoder_schema(results):
    d = _load(results[0], "encoder")
    inf = d["inference"]["toy"]
    assert {"ours", "ours_plain", "torch", "textbook"} <= set(inf["tokens_per_s"])
    assert all(_is_summary(s) for s in inf["tokens_per_s"].values())
    assert _is_summary(inf["speedup"]["ours"]["torch"]) and "matmul_gflops" in inf
    # same weights: ours equals nn.TransformerEncoder's regular path at real tokens
    assert inf["correctness"]["ours_vs_torch_regular"] < 1e-5
    assert inf["correctness"]["ours_plain_vs_torch_regular"] < 1e-5
    for label, by_size in d["training"].items():
        assert _is_summary(by_size["toy"]["speedup"]["ours"]["torch"]), label


def test_other_schemas(results):
    out = results[0]
    a = _load(out, "attention")
    for T, r in a["time"].items():
        assert {"math", "fused", "local"} <= set(r["ms"]), T
        assert set(a["memory"][T]["peak_bytes"]) == {"math", "fused", "local"}
    b = _load(out, "bf16")
    assert _is_summary(b["inference"]["toy"]["speedup_over_fp32"]["bf16_autocast"])
    assert _is_summary(b["training"]["toy"]["speedup_over_fp32"]["bf16_autocast"])
    o = _load(out, "optimizer")
    assert _is_summary(o["speedup_over_single"]["fused"]) and set(o["ms_per_step"]) == {"single", "foreach", "fused"}
    assert o["max_weight_difference_vs_single"]["fused"] < 1e-6  # the same update
    se = _load(out, "sparse_embeddings")
    assert _is_summary(se["speedup_over_dense"]) and set(se["ms_per_step"]) == {"dense", "sparse"}
    assert se["max_weight_difference"] < 1e-6  # the same step
    g = _load(out, "generation")
    assert all(r["same_tokens"] for r in g["by_context"].values())  # cache == full forward
    tr = _load(out, "translation")
    assert tr["same_tokens"] == {"greedy": True, "beam5": True}  # cache == full forward, greedy and beam
    assert all(_is_summary(v["sentences_per_s"]) and _is_summary(v["tokens_per_s"]) for v in tr["variants"].values())
    assert set(tr["variants"]) == {"greedy_cached", "greedy_uncached", "beam5_cached", "beam5_uncached"}
    assert len({v["output_tokens"] for v in tr["variants"].values()}) == 1  # <eos> banned: same work
    assert all(_is_summary(s) for s in (*tr["cached_speedup"].values(), *tr["beam_over_greedy_time"].values()))
    p = _load(out, "data_pipeline")
    assert 0 <= p["padding"]["padding_fraction_bucketed"] <= p["padding"]["padding_fraction_random"] < 1
    m = _load(out, "mfu")
    assert 0 < m["by_size"]["toy"]["impls"]["ours"]["fraction_of_peak"]["median"]


def test_padding_packing_equals_padded_forward():
    """The optimisation the encoder benchmark measures: `set_padding_packing()` changes real
    rows by float rounding only (forward and gradients) and zeroes the padded rows."""
    from scratchformer.nn import Encoder, TransformerConfig, padding_mask

    torch.manual_seed(0)
    for norm_first in (False, True):
        cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0,
                                norm_first=norm_first, position="rope")
        enc = Encoder(cfg)
        x = torch.randn(3, 6, 16, requires_grad=True)
        m = padding_mask(torch.tensor([6, 2, 0]), 6)
        outs = []
        for packed in (False, True):
            enc.set_padding_packing(packed)
            y = enc(x, m)
            grads = torch.autograd.grad((y * m[..., None]).square().sum(), [x, *enc.parameters()])
            outs.append((y, grads))
        (a, ga), (b, gb) = outs
        assert (a[m] - b[m]).abs().max() < 1e-5
        assert (b[~m] == 0).all()
        assert max(float((u - v).abs().max()) for u, v in zip(ga, gb)) < 1e-5


def test_encoder_flops_count():
    size = dict(d_model=4, n_heads=1, d_ff=8, n_layers=1)
    # 2 tokens, one sequence of length 2: 2*2*(4*16 + 2*32) + 4*2*2*4
    assert encoder.encoder_flops(size, torch.tensor([2])) == 2 * 2 * (64 + 64) + 4 * 4 * 4


def test_an_only_run_keeps_the_other_tables_in_the_index(tmp_path):
    """`--only X` redoes X; the index still lists the tables measured earlier (read back from
    their JSON files; an unreadable one is left out), and says which ones are older."""
    (tmp_path / "encoder.json").write_text(json.dumps({"title": "Encoder", "targets": [
        {"name": "speed", "value": 2.0, "goal": 1.0, "unit": "x", "met": True}]}))
    (tmp_path / "bf16.json").write_text("{ truncated")
    found = run_all.earlier_results(tmp_path, exclude={"long_sequence"})
    assert list(found) == ["encoder"]
    machine = common.machine_info()
    run_all.write_readme({**found, "mfu": {"title": "MFU", "targets": []}}, {"mfu": 1.0}, machine, tmp_path, quick=False)
    index = (tmp_path / "README.md").read_text()
    assert "[encoder](encoder.md): Encoder" in index and "| speed | 2x | 1x | yes |" in index
    assert "the other tables (encoder) are from earlier runs" in index


def test_index_rewrites_each_page_from_its_json_with_the_current_text(tmp_path):
    """`run_all --index` re-renders every `<name>.md` from the saved JSON: the attention page says
    that the blocked window kernel exists and is the default (it once said one would be needed),
    and the saved page equals the re-rendered one."""
    import shutil

    shutil.copy(common.RESULTS_DIR / "attention.json", tmp_path / "attention.json")
    assert run_all.render_pages(tmp_path) == ["attention"]
    page = (tmp_path / "attention.md").read_text(encoding="utf-8")
    assert "(`window_impl='blocked'`, the default; benchmarks/long_sequence.py) is O(T·window)." in page
    assert "would make it" not in page
    assert page == (common.RESULTS_DIR / "attention.md").read_text(encoding="utf-8")


def test_engine_ratios_name_both_contenders():
    """Each ratio of a translation-engines cell is that pair's (a ratio keyed by the anchor alone
    once reported the readable path as 'ours' and fp32 as 'int8')."""
    from benchmarks.translation_engines import cell_ratios

    times = {"ours": [1.0, 2.0], "ours_readable": [4.0, 8.0], "ours_int8": [0.5, 1.0],
             "ct2_fp32": [2.0, 4.0], "ct2_int8": [0.25, 0.5]}
    r = cell_ratios(times)
    assert r["ours/ct2_fp32"]["median"] == 2.0  # ours twice as fast as CTranslate2 fp32
    assert r["ours_readable/ct2_fp32"]["median"] == 0.5
    assert r["ours_int8/ct2_int8"]["median"] == 0.5
    assert r["ours/ct2_int8"]["median"] == 0.25


def test_linear_layouts_runs_every_kernel_and_checks_the_rule(tmp_path):
    """The layout benchmark times each kernel on toy shapes, and its rule check flags a cell only
    where the rule's pick measured slower (the check itself, on made-up numbers)."""
    from benchmarks import linear_layouts
    from scratchformer.nn import fast_linear

    res = linear_layouts.run(quick=True, out_dir=tmp_path, log=lambda *a: None)
    assert (tmp_path / "linear_layouts.json").exists() and (tmp_path / "linear_layouts.md").exists()
    assert len(res["cells"]) == 4
    for c in res["cells"]:
        assert {"transposed", "bf16", "int8"} <= set(c["speedup_vs_F.linear"])
        assert all(v["median"] > 0 for v in c["us_per_call"].values())
        assert c["rule_onednn"] == (c["rows"] >= fast_linear.RULES.onednn_min_rows)
    made_up = [{"out": 768, "in": 256, "rows": 1, "rule_transposed": True,
                "speedup_vs_F.linear": {"transposed": {"median": 0.8}}},
               {"out": 256, "in": 1024, "rows": 1, "rule_transposed": False,
                "speedup_vs_F.linear": {"transposed": {"median": 1.01}}}]
    check = linear_layouts.rule_check(made_up)
    assert len(check["rule_wrong"]) == 1 and check["rule_wrong"][0].startswith("(768, 256) x 1")


def test_engine_repeats_verdicts_need_mean_minus_std(tmp_path):
    """A target counts as met over runs only when mean - std reaches the goal; the bf16 ratio is
    listed without a goal, and runs without it (before the bf16 contender) still summarise."""
    import json

    from benchmarks.engine_repeats import summarize

    def run(name, fp32, int8, bf16=None):
        ours_vs = {"ours/ct2_fp32": {"median": fp32}, "ours_int8/ct2_int8": {"median": int8}}
        if bf16 is not None:
            ours_vs["ours_bf16/ct2_fp32"] = {"median": bf16}
        cell = {"threads": 1, "size": "hsk", "batch": 32, "beam": 4, "ours_vs": ours_vs}
        path = tmp_path / name / "translation_engines.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"cells": [cell, dict(cell, threads=2)]}))
        return path

    res, md = summarize([run("a", 1.10, 0.60, 0.9), run("b", 1.04, 0.80), run("c", 1.07, 0.70, 1.1)])
    fp32, int8, bf16 = (res[f"hsk b32 beam4 {k}"] for k in ("ours/ct2_fp32", "ours_int8/ct2_int8", "ours_bf16/ct2_fp32"))
    assert fp32["values"] == [1.10, 1.04, 1.07] and abs(fp32["mean"] - 1.07) < 1e-9
    assert int8["values"] == [0.60, 0.80, 0.70] and bf16["values"] == [0.9, 1.1] and bf16["goal"] is None
    rows = [line for line in md.splitlines() if line.startswith("| hsk")]
    assert rows[0].endswith("| met |")  # 1.07 - 0.03 >= 1.0
    assert rows[1].endswith("| inconclusive (goal within one std) |")  # 0.70 +- 0.10 against 0.7
    assert rows[2].endswith("| – | – |") and "a/translation_engines.json" in md


def test_cache_verify_quick_checks_cold_by_hashing_and_warm_by_stat(tmp_path):
    from benchmarks import cache_verify

    res = cache_verify.run(quick=True, out_dir=tmp_path, log=lambda *a: None)
    assert set(res["caches"]) == {"prepared", "big"}
    for c in res["caches"].values():
        s = c["summary"]
        # a cold check hashes every recorded byte; a warm one only stats: far below it in every repetition
        assert max(c["seconds"]["warm, a new process (sidecar)"]) < min(c["seconds"]["cold, files in the page cache"])
        assert s["warm, this process"]["median"] <= s["warm, a new process (sidecar)"]["median"]
    assert res["caches"]["big"]["bytes"] > 16 << 20 and res["caches"]["big"]["files"] == 2
    assert (tmp_path / "cache_verify_quick.md").is_file() and (tmp_path / "cache_verify_quick.json").is_file()
