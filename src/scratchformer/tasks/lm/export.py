"""`scratchformer export RUN --format onnx` for a language model: one ONNX graph of a decoding
step with the KV cache as inputs and outputs, so that ONNX Runtime generates without
recomputing the prompt.

    inputs   input_ids (B, T) int64; past_{i}_key, past_{i}_value (B, H_kv, P, D) float32 per layer i
    outputs  logits (B, T, V); present_{i}_key, present_{i}_value (B, H_kv, P + T, D)

B, T and P are dynamic. The prompt goes in as one step with P = 0 (empty pasts), then one
token per step, each step feeding the presents back as the pasts. Positions continue from P
(our cache's `length`), so RoPE / sinusoidal / learned positions are those of our decoding; a
learned-position model stops at its table (`max_positions` in export.json), and a run trained
with a sliding window is refused (its rolling cache keeps only the window, which this
graph's concatenating cache does not).

Why a second cache class: ours (`nn.cache.KVCache`) grows a buffer in place, by doubling, for
O(1) appends; a traced graph needs pure inputs -> outputs, so `ConcatCache` concatenates
instead (the same keys and values, in the same order). The projections run as plain `F.linear`
(the oneDNN path does not export, see tasks/classify/export.py).
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...data.hf_tokenizer import to_hf
from ...data.specials import NUM_SPECIALS
from ...errors import UserError
from ...fileio import atomic_write_text
from ...nn.cache import KVCache
from ...nn.fast_linear import use_onednn
from ..export_folder import parity_failed, staged_export
from ..onnx_folder import new_export_folder

OPSET = 18
TOLERANCE = 1e-4


class ConcatCache(KVCache):
    """past keys/values in, present out: `update` concatenates (no buffer written in place)."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor):
        super().__init__()
        self._k, self._v, self.length = k, v, k.shape[2]

    def update(self, k_new, v_new):
        self._k = torch.cat([self._k, k_new], 2)  # (B, H_kv, P + T, D)
        self._v = torch.cat([self._v, v_new], 2)
        self.length = self._k.shape[2]
        return self._k, self._v


class _Step(nn.Module):
    def __init__(self, model, n_layers: int):
        super().__init__()
        self.m, self.n = model, n_layers

    def forward(self, input_ids, past):
        caches = [ConcatCache(past[2 * i], past[2 * i + 1]) for i in range(self.n)]
        x = self.m.embed(input_ids, offset=caches[0].length)  # (B, T, C), positions from P
        # is_causal=True for every T: the lower-right mask of one query is all True anyway, and
        # the traced T is symbolic (DecoderLM.forward's `T > 1` test cannot be traced)
        logits = self.m.head(self.m.encoder(x, is_causal=True, caches=caches))  # (B, T, V)
        return logits, [t for c in caches for t in (c._k, c._v)]


def export_lm_onnx(run_dir: str | Path, out_dir: str | Path, check: bool = True) -> dict:
    from .inference import LanguageModel

    run_dir, out = Path(run_dir), new_export_folder(out_dir)
    lm = LanguageModel.load(run_dir)
    model = lm.model.eval()
    caches = model.new_caches()
    if any(type(c) is not KVCache for c in caches):
        raise UserError(f"{run_dir}: a sliding-window model keeps a rolling cache; the ONNX export's cache "
                        "concatenates and would not drop old positions: not exported")
    n = len(caches)
    with torch.no_grad():
        model(torch.tensor([[5, 6]]), caches)  # a real past of 2 positions, for the example inputs
    past = [t.clone() for c in caches for t in c.get()]
    names = ["input_ids"] + [f"past_{i}_{kind}" for i in range(n) for kind in ("key", "value")]
    outputs = ["logits"] + [f"present_{i}_{kind}" for i in range(n) for kind in ("key", "value")]
    b, t, p = torch.export.Dim("batch", min=1), torch.export.Dim("new", min=1), torch.export.Dim("past", min=1)
    hf = to_hf(lm.tokenizer)  # refuses what has no standard form, before any writing
    with staged_export(out, "onnx", run_dir) as stage:
        previous = use_onednn(False)
        try:
            with torch.no_grad():
                program = torch.onnx.export(_Step(model, n), (torch.tensor([[7, 8, 9]]), past), input_names=names,
                                            output_names=outputs, opset_version=OPSET, dynamo=True,
                                            dynamic_shapes=({0: b, 1: t}, [{0: b, 2: p} for _ in past]),
                                            external_data=False, verbose=False)
                program.save(str(stage / "model.onnx"))
        finally:
            use_onednn(previous)
        atomic_write_text(stage / "tokenizer.json", hf.to_str(pretty=True))
        source = resources.files(__package__).joinpath("onnx_generate.py").read_text(encoding="utf-8")
        atomic_write_text(stage / "generate.py", source)
        kv_heads, head_dim = past[0].shape[1], past[0].shape[3]
        meta = {"format": "onnx", "task": "lm", "source_run": str(run_dir), "opset": OPSET, "inputs": names,
                "outputs": outputs, "n_layers": n, "kv_heads": kv_heads, "head_dim": head_dim,
                "max_positions": model.max_positions, "context": lm.context,
                "never_generate_ids_below": NUM_SPECIALS,  # our specials <pad> <unk> <bos> <eos> <cls>
                "tokenizer": lm.tokenizer.kind,
                "note": "prompt: one step with empty pasts (P = 0); then one token per step, presents fed back"}
        atomic_write_text(stage / "README.md", _readme(meta, out))
        atomic_write_text(stage / "export.json", json.dumps(meta, indent=1) + "\n")
        report = {}
        if check:
            report = check_lm_parity(lm, stage)
            meta["parity"] = report
            atomic_write_text(stage / "export.json", json.dumps(meta, indent=1) + "\n")
        if check and (report["max_abs_diff"] > TOLERANCE or not report["greedy_equal"]):
            raise parity_failed(f"the export differs from our model (max |Δ logits| {report['max_abs_diff']:.2e} over "
                                f"{report['steps']} greedy steps, tolerance {TOLERANCE:g}; greedy tokens equal: "
                                f"{report['greedy_equal']}; standard tokenizer gives our ids: {report['tokenizer_equal']})",
                                out)
    return report


def _readme(meta: dict, out: Path) -> str:
    return f"""# ONNX export of {meta["source_run"]} (a language model)

Runs with `onnxruntime`, `tokenizers` and `numpy` (no torch, no scratchformer):

```python
import sys
sys.path.insert(0, "{out}")
from generate import ExportedLM
lm = ExportedLM("{out}")
print(lm.generate("a prompt", max_new_tokens=50))   # greedy: the run's own tokens
```

- `model.onnx`: one decoding step with the KV cache as inputs and outputs: `input_ids` (B, T) int64 and
  `past_{{i}}_key`, `past_{{i}}_value` (B, {meta["kv_heads"]}, P, {meta["head_dim"]}) float32 for each of the
  {meta["n_layers"]} layers; outputs `logits` (B, T, V) and the presents (P + T positions). The prompt goes in
  with empty pasts (P = 0), then one token a step.
- `tokenizer.json`: a standard `tokenizers` file (`Tokenizer.from_file`); `encode(text, add_special_tokens=False)`
  gives the model's ids, `decode(ids)` the text.
- `generate.py`: encode, decode and generation as the run's model does it: an empty prompt refused, a prompt
  read by its last {meta["context"]} tokens (the window), ids below {meta["never_generate_ids_below"]} (the
  specials) never generated, the window cropped and re-filled when full. `export.json`: the settings.
"""


def onnx_greedy(session, prompt_ids: list[int], steps: int, n_layers: int, kv_heads: int, head_dim: int,
                first_id: int = 5) -> tuple[list[int], list[np.ndarray]]:
    """Greedy decoding with the exported step: the prompt with empty pasts, then one token a step."""
    past = {f"past_{i}_{kind}": np.zeros((1, kv_heads, 0, head_dim), np.float32)
            for i in range(n_layers) for kind in ("key", "value")}
    ids, out, logits_seen = np.array([prompt_ids], dtype=np.int64), [], []
    for _ in range(steps):
        res = session.run(None, {"input_ids": ids, **past})
        logits = res[0][0, -1]
        logits_seen.append(logits)
        token = int(logits[first_id:].argmax()) + first_id
        out.append(token)
        past = {k: v for k, v in zip(past, res[1:])}
        ids = np.array([[token]], dtype=np.int64)
    return out, logits_seen


def check_lm_parity(lm, folder: Path, steps: int = 24) -> dict:
    """Greedy decoding of a prompt from the run's own text by ONNX Runtime and by ours (KV
    cache): the tokens, and the largest logit difference over every step."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    prompt = list(range(5, min(lm.tokenizer.vocab_size, 13)))
    model = lm.model
    caches = model.new_caches()
    want_tokens, want_logits = [], []
    with torch.no_grad():
        logits = model(torch.tensor([prompt]), caches)[0, -1]
        for _ in range(steps):
            want_logits.append(logits.numpy())
            token = int(logits[5:].argmax()) + 5
            want_tokens.append(token)
            logits = model(torch.tensor([[token]]), caches)[0, -1]
    p0 = caches[0].get()[0]
    got_tokens, got_logits = onnx_greedy(session, prompt, steps, len(caches), p0.shape[1], p0.shape[3])
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got_logits, want_logits))
    # the folder's own generate.py past the window (it crops and re-fills as ours), and its tokenizer
    from .onnx_generate import ExportedLM

    exported = ExportedLM(folder, threads=1)
    text = _sample_text(lm)
    ids = lm.tokenizer.encode(text)
    long_steps = lm.context + 8
    ours_long = lm.generate_ids(ids[:8] or [5], long_steps, temperature=0.0, seed=0)
    theirs_long = exported.generate_ids(ids[:8] or [5], long_steps)
    return {"steps": steps, "prompt_tokens": len(prompt), "max_abs_diff": diff,
            "greedy_equal": got_tokens == want_tokens and ours_long == theirs_long,
            "window_steps": long_steps, "tokenizer_equal": exported.encode(text) == ids
            and exported.decode(ids) == lm.tokenizer.decode(ids, skip_special=False)}


def _sample_text(lm, n: int = 400) -> str:
    """Some of the run's own training text (else a few of the vocabulary's tokens)."""
    try:
        from .data import load_lm_text

        return load_lm_text(lm.recipe.data).valid[:n]
    except Exception:  # noqa: BLE001 - the data may be gone
        return lm.tokenizer.decode(list(range(5, min(lm.tokenizer.vocab_size, 40))))
