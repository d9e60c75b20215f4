"""Text -> the inputs of an exported classifier (`model.onnx`), with the standard library and
numpy only: this file is copied beside the model as `preprocess.py`, so that the export folder
runs with `onnxruntime` and nothing of scratchformer or torch.

    import json, numpy as np, onnxruntime as ort
    from preprocess import Preprocessor
    pre = Preprocessor("exported/demo")
    sess = ort.InferenceSession("exported/demo/model.onnx")
    feeds = pre(["央行宣布下调存款准备金率"])               # {"input_ids", ["bigram_ids",] "attention_mask"}
    logits, embedding = sess.run(None, feeds)
    print(pre.labels[int(logits[0].argmax())])

It reproduces what the run's classifier does before its model: the char tokenizer's ids
(specials: <pad>=0 <unk>=1 <cls>=4), an optional leading <cls>, truncation to `max_len`
tokens, the hashed bigrams `1 + crc32(prev_char + char) % (buckets - 1)` and right padding.
"""
import json
import zlib
from pathlib import Path

import numpy as np

PAD_ID, UNK_ID, CLS_ID = 0, 1, 4


class Preprocessor:
    def __init__(self, folder):
        folder = Path(folder)
        self.meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        tok = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        if tok.get("type") != "char":
            raise ValueError(f"preprocess.py reads char tokenizers; this export has a {tok.get('type')!r} one "
                             "(use scratchformer's Tokenizer.load on tokenizer.json)")
        self.stoi = {t: i for i, t in enumerate(tok["vocab"])}
        self.lowercase = bool(tok.get("lowercase", False))
        self.labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))

    def tokens(self, text):
        """(ids, bigram ids) of one text, before truncation."""
        chars = list(text.lower() if self.lowercase else text)
        ids = [self.stoi.get(c, UNK_ID) for c in chars]
        n = self.meta["bigram_buckets"]
        prev = [""] + chars[:-1]
        bis = [1 + zlib.crc32((p + c).encode("utf-8")) % (n - 1) for p, c in zip(prev, chars)] if n else [0] * len(ids)
        return ids, bis

    def count_tokens(self, text):
        return len(self.tokens(text)[0])

    def __call__(self, texts):
        m = self.meta
        room = m["max_len"] - int(m["cls_token"])
        rows = []
        for text in texts:
            pairs = list(zip(*self.tokens(text)))
            keep = m.get("truncate_keep", "head")
            if len(pairs) > room:
                if keep == "head":
                    pairs = pairs[:room]
                elif keep == "tail":
                    pairs = pairs[len(pairs) - room:]
                else:  # head+tail
                    head = (room + 1) // 2
                    pairs = pairs[:head] + (pairs[len(pairs) - (room - head):] if room - head else [])
            rows.append(([(CLS_ID, 0)] if m["cls_token"] else []) + pairs)
        width = max(1, max(len(r) for r in rows))
        ids = np.full((len(rows), width), PAD_ID, dtype=np.int64)
        bis = np.zeros((len(rows), width), dtype=np.int64)
        for i, r in enumerate(rows):
            if r:
                ids[i, :len(r)] = [a for a, _ in r]
                bis[i, :len(r)] = [b for _, b in r]
        feeds = {"input_ids": ids, "attention_mask": ids != PAD_ID}
        if "bigram_ids" in m["inputs"]:
            feeds["bigram_ids"] = bis
        return feeds
