"""Text in, text out for an exported language model (`scratchformer export RUN --format onnx`),
with `onnxruntime`, `tokenizers` and numpy only: this file is copied beside the model as
`generate.py`, so that the folder runs without scratchformer or torch.

    from generate import ExportedLM
    lm = ExportedLM("exported/lm")
    print(lm.generate("ROMEO:", max_new_tokens=50))            # greedy
    print(lm.generate("ROMEO:", 50, temperature=0.8, seed=0))  # sampled (numpy's generator)
    print(lm.generate("ROMEO:", 50, temperature=0.8, top_k=40, top_p=0.9))  # cut to the likeliest, as the run's
    ids = lm.encode("ROMEO:"); text = lm.decode(ids)

What it reproduces of the run's `LanguageModel.generate` (export.json holds the settings):
  1. `tokenizer.json` (a standard `tokenizers` file giving our ids; no specials are added);
  2. an empty prompt is refused; a prompt longer than the window (`context`) is read by its last
     `context` tokens, as ours;
  3. the specials (ids below `never_generate_ids_below`) are never generated;
  4. when the window is full, the last `keep` tokens are fed again with empty pasts (ours crops
     and re-fills its cache the same way), so a long generation never runs past the positions
     the model knows.
Greedy decoding gives our tokens (the export's parity check). Sampling takes what the run's sampler
takes (temperature, top_k: the k likeliest tokens, top_p: the smallest set whose probability reaches
p) with numpy's generator, so a seed does not give the tokens our torch sampler gives.
"""
import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


class ExportedLM:
    def __init__(self, folder, threads=None):
        import onnxruntime as ort

        folder = Path(folder)
        self.meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self.window = int(self.meta["context"])
        self.keep = max(1, self.window - self.window // 4)
        self.first_id = int(self.meta["never_generate_ids_below"])

    def encode(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def _empty(self):
        m = self.meta
        return {f"past_{i}_{kind}": np.zeros((1, m["kv_heads"], 0, m["head_dim"]), np.float32)
                for i in range(m["n_layers"]) for kind in ("key", "value")}

    def _step(self, ids, past):
        res = self.session.run(None, {"input_ids": np.array([ids], dtype=np.int64), **past})
        return res[0][0, -1], dict(zip(past, res[1:]))

    def generate_ids(self, ids, max_new_tokens, temperature=0.0, seed=None, on_token=None, top_k=None, top_p=None):
        """The new ids; `on_token(id)` is called with each as soon as it is chosen."""
        if not ids:
            raise ValueError("the prompt encodes to no tokens; give some text to continue")
        rng = np.random.default_rng(seed)
        seq, out = list(ids), []
        logits, past = self._step(seq[-self.window:], self._empty())
        for step in range(max_new_tokens):
            token = pick(logits[self.first_id:], temperature, top_k, top_p, rng) + self.first_id
            seq.append(token)
            out.append(token)
            if on_token is not None:
                on_token(token)
            if step == max_new_tokens - 1:
                break
            length = next(iter(past.values())).shape[2]
            if length + 1 > self.window:  # the window is full: crop, re-fill
                logits, past = self._step(seq[-self.keep:], self._empty())
            else:
                logits, past = self._step([token], past)
        return out

    def generate(self, prompt, max_new_tokens=200, temperature=0.0, seed=None, top_k=None, top_p=None):
        if not isinstance(prompt, str) or prompt == "":
            raise ValueError("the prompt is empty; give some text to continue")
        return self.decode(self.generate_ids(self.encode(prompt), max_new_tokens, temperature, seed,
                                             top_k=top_k, top_p=top_p))


def pick(logits, temperature=0.0, top_k=None, top_p=None, rng=None):
    """The index of the next token in `logits` (those that may be generated): the argmax at temperature
    0, else a draw from softmax(logits / temperature) kept to the `top_k` likeliest and to the smallest
    set whose probability reaches `top_p` (the likeliest is always kept), as the run's sampler does."""
    z = np.asarray(logits, dtype=np.float64)
    if not temperature or temperature <= 0:
        return int(z.argmax())
    z = z / temperature
    if top_k is not None and top_k < len(z):
        z = np.where(z < np.partition(z, -top_k)[-top_k], -np.inf, z)
    p = np.exp(z - z.max())
    p /= p.sum()
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        above = np.cumsum(p[order]) - p[order]  # the mass of the tokens ranked above each one
        p[order[above >= top_p]] = 0.0
        p /= p.sum()
    return int((rng or np.random.default_rng()).choice(len(p), p=p))
