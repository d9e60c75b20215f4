"""Text -> the inputs of an exported classifier (`model.onnx`), with `tokenizers` and numpy only:
this file is copied beside the model as `preprocess.py`, so that the export folder runs with
`onnxruntime` + `tokenizers` and nothing of scratchformer or torch.

    import onnxruntime as ort
    from preprocess import Preprocessor
    pre = Preprocessor("exported/demo")
    sess = ort.InferenceSession("exported/demo/model.onnx")
    logits, embedding = sess.run(None, pre(["央行宣布下调存款准备金率"]))
    print(pre.labels[int(logits[0].argmax())])

What it reproduces of the run's classifier (export.json "preprocess" holds the settings):
  1. the text prefix (e5's "query: "), then `tokenizer.json` (a standard `tokenizers` file
     giving our ids) without specials;
  2. hashed bigrams when the run has them: of characters, `1 + crc32(prev_char + char) % (n - 1)`,
     or of token ids, `1 + crc32(f"{prev_id} {id}") % (n - 1)` (data/bigrams.py); with
     character trigrams, `bigram + n * (1 + crc32(p2 + "\x1f" + p1 + "\x1f" + char) % (m - 1))`;
  3. truncation to `max_len` tokens with the specials, keeping the head, the tail or both;
  4. the specials ([CLS] ... [SEP], <s> ... </s>, or a leading <cls>) and right padding with
     the run's pad id; `attention_mask` is True on real tokens.
tokenizer.json alone does 1, 3 (head) and 4 too: `Tokenizer.from_file(...).encode_batch(texts)`
has the template, truncation and padding set (the prefix is the caller's, as e5 asks).
"""
import json
import zlib
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer


class Preprocessor:
    def __init__(self, folder):
        folder = Path(folder)
        self.meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        self.labels = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
        self.p = self.meta["preprocess"]
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_truncation()  # 3 and 4 are done below, for every keep mode
        self.tokenizer.no_padding()

    def tokens(self, texts):
        """[(ids, bigram ids or None)] of each text, before truncation and specials."""
        p = self.p
        encs = self.tokenizer.encode_batch([p["text_prefix"] + t for t in texts], add_special_tokens=False)
        out = []
        for text, enc in zip(texts, encs):
            ids, n = enc.ids, p["bigram_buckets"]
            if p["bigrams"] == "char":
                chars = list(text.lower() if p["lowercase"] else text)
                if len(chars) != len(ids):
                    raise ValueError(f"tokenizer.json gave {len(ids)} ids for {len(chars)} characters")
                bis = [1 + zlib.crc32((a + b).encode("utf-8")) % (n - 1) for a, b in zip([""] + chars[:-1], chars)]
                m = p.get("trigram_buckets", 0)
                if m:
                    tri = [1 + zlib.crc32(f"{a}\x1f{b}\x1f{c}".encode("utf-8")) % (m - 1)
                           for a, b, c in zip(["", ""] + chars[:-2], [""] + chars[:-1], chars)]
                    bis = [b + n * t for b, t in zip(bis, tri)]
            elif p["bigrams"] == "id":
                bis = [1 + zlib.crc32(f"{a} {b}".encode()) % (n - 1) for a, b in zip([-1] + ids[:-1], ids)]
            else:
                bis = None
            out.append((ids, bis))
        return out

    def count_tokens(self, text):
        return len(self.tokens([text])[0][0])

    def _truncate(self, seq, room):
        if len(seq) <= room:
            return seq
        keep = self.p["truncate_keep"]
        if keep == "head":
            return seq[:room]
        if keep == "tail":
            return seq[len(seq) - room:]
        tail = room // 2  # head+tail: the first ceil(room / 2), the last floor(room / 2)
        return seq[:room - tail] + (seq[len(seq) - tail:] if tail else [])

    def __call__(self, texts):
        p = self.p
        pre, suf = p["prefix_ids"], p["suffix_ids"]
        room = p["max_len"] - len(pre) - len(suf)
        rows, bis = [], []
        for ids, bi in self.tokens(list(texts)):
            rows.append(pre + self._truncate(ids, room) + suf)
            if bi is not None:
                bis.append([0] * len(pre) + self._truncate(bi, room) + [0] * len(suf))
        width = max([1] + [len(r) for r in rows])
        input_ids = np.full((len(rows), width), p["pad_id"], dtype=np.int64)
        for i, r in enumerate(rows):
            input_ids[i, :len(r)] = r
        # what the run's model masks: a "<pad>" typed in a text becomes the pad id there too
        feeds = {"input_ids": input_ids, "attention_mask": input_ids != p["pad_id"]}
        if "bigram_ids" in self.meta["inputs"]:
            feeds["bigram_ids"] = np.zeros((len(rows), width), dtype=np.int64)
            for i, b in enumerate(bis):
                feeds["bigram_ids"][i, :len(b)] = b
        return feeds
