"""`scratchformer export RUN --format transformers|ctranslate2` for a translation run: the run's
`Seq2Seq` as a `transformers` encoder-decoder folder (that `from_pretrained` loads and
CTranslate2's `TransformersConverter` converts), or already converted for CTranslate2.

The mapping onto the Marian / Pegasus layouts (and the five differences it closes) is in
`hf_layout.py`; the parity checks every export runs before it is written are in `export_check.py`.
Everything is written into a staging folder beside `OUT` and renamed into place only when the check
passed, with its completion record (tasks/export_folder.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ...data.specials import BOS, EOS, PAD_ID
from ...errors import UserError
from ...fileio import atomic_write_text, make_dirs, remove
from ..export_folder import check_out, parity_failed, staged_export
from ..runs import RunDir
from .export_check import check_ctranslate2, check_transformers
from .hf_layout import SOURCE_DIR, Vocab, _write_tokenizer, generation_config, hf_config, hf_state, layout_of, \
    n_positions_for, vocab_list

FORMATS = ("transformers", "ctranslate2")


# ----------------------------------------------------------------------------- the export
def _out_folder(out_dir: str | Path) -> Path:
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UserError("exporting translation runs needs transformers: pip install 'scratchformer[export]'") from None
    return check_out(out_dir)


def load_translator(run_dir: str | Path):
    from .inference import Translator

    run = RunDir(run_dir)
    if run.is_ensemble:
        raise UserError(f"{run_dir} is an ensemble run; its members decode together, which one exported model "
                        f"cannot: export one member ({Path(run_dir) / 'member0'})")
    if run.task_name() != "translate":
        raise UserError(f"{run_dir} holds a {run.task_name()!r} run; --format transformers/ctranslate2 exports "
                        "translation runs (classify and lm runs: --format onnx)")
    tr = Translator.load(run_dir)
    if tr.recipe.model.kind != "transformer":
        raise UserError(f"{run_dir}: --format transformers/ctranslate2 exports Transformer translators; this run is "
                        f"model.kind={tr.recipe.model.kind}: serve the run folder instead")
    return tr


def write_transformers(tr, folder: Path) -> dict:
    """Write the transformers folder of translator `tr` into `folder` (new); returns its meta."""
    import transformers

    layout = layout_of(tr.recipe)
    shared = tr.recipe.model.share_embeddings
    vocab = Vocab(layout, tr.src_tok, tr.tgt_tok, shared)
    n_pos = n_positions_for(tr.recipe)
    cfg = hf_config(tr.recipe, layout, vocab, n_pos)
    cls = transformers.MarianMTModel if layout == "marian" else transformers.PegasusForConditionalGeneration
    hf = cls(cfg).eval()
    sd = hf_state(tr.model, layout, vocab)
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    if unexpected or [k for k in missing if "embed_positions" not in k]:
        raise RuntimeError(f"weight mapping out of date: missing {missing}, unexpected {unexpected}")
    hf.generation_config = generation_config(tr.recipe, vocab)
    make_dirs(folder)
    hf.save_pretrained(str(folder))
    pad_name = vocab.tgt_tokens[vocab.pad]
    _write_tokenizer(folder, tr.tgt_tok, vocab.tgt_tokens, pad_name)
    if not shared:  # the source side's own tokenizer, in source/
        _write_tokenizer(folder / SOURCE_DIR, tr.src_tok, vocab.src_tokens, vocab.src_tokens[PAD_ID])
    d = tr.recipe.decode
    return {"task": "translate", "layout": layout, "architecture": cls.__name__,
            "shared_vocabulary": shared, "source_tokenizer": "tokenizer.json" if shared else f"{SOURCE_DIR}/tokenizer.json",
            "target_tokenizer": "tokenizer.json", "decoder_start_token_id": vocab.start,
            "banned_ids": vocab.banned, "residual_permutation": "sines then cosines (PE_hf = PE_ours[:, 0::2 | 1::2])",
            "max_positions": n_pos, "source_ends_with": EOS,
            "decode": {"beam": d.beam, "length_penalty": d.length_penalty, "max_len_ratio": d.max_len_ratio,
                       "max_len_offset": d.max_len_offset, "max_output_len": d.max_output_len,
                       "max_input_len": d.max_input_len}}


def _move_files(src: Path, dst: Path) -> None:
    """Every file of `src` (and its subfolders) renamed into `dst` (each rename is atomic)."""
    for path in sorted(src.rglob("*")):
        if path.is_file():
            target = dst / path.relative_to(src)
            make_dirs(target.parent)
            os.replace(path, target)


def export_transformers(run_dir: str | Path, out_dir: str | Path, check: bool = True) -> dict:
    out = _out_folder(out_dir)
    tr = load_translator(run_dir)
    with staged_export(out, "transformers", run_dir) as stage:
        meta = write_transformers(tr, stage)
        meta.update(format="transformers", source_run=str(run_dir))
        report = check_transformers(tr, stage) if check else {}
        meta["parity"] = report
        atomic_write_text(stage / "export.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        if check and not report["equal"]:
            raise parity_failed(f"the transformers export differs from our model ({_summary(report)})", out)
    return report


def export_ctranslate2(run_dir: str | Path, out_dir: str | Path, check: bool = True,
                       quantization: str | None = None) -> dict:
    out = _out_folder(out_dir)
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        raise UserError("--format ctranslate2 needs ctranslate2: pip install 'scratchformer[export]'") from None
    tr = load_translator(run_dir)
    with staged_export(out, "ctranslate2", run_dir) as stage:
        # the converter's input and output (it empties its output folder first), moved up when checked
        hf_dir, ct2_dir = stage / ".transformers", stage / ".ct2"
        meta = write_transformers(tr, hf_dir)
        convert(hf_dir, ct2_dir, meta, quantization)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            os.replace(hf_dir / name, ct2_dir / name)
        if not meta["shared_vocabulary"]:
            _move_files(hf_dir / SOURCE_DIR, ct2_dir / SOURCE_DIR)
        meta.update(format="ctranslate2", source_run=str(run_dir), quantization=quantization or "float32")
        report = {}
        if check:
            report = {"transformers": check_transformers(tr, hf_dir), "ctranslate2": check_ctranslate2(tr, ct2_dir)}
            report["equal"] = report["transformers"]["equal"] and report["ctranslate2"]["equal"]
        _move_files(ct2_dir, stage)
        remove(hf_dir)
        remove(ct2_dir)
        meta["parity"] = report
        atomic_write_text(stage / "export.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        if check and not report["equal"]:
            raise parity_failed(f"the CTranslate2 export differs from our model ({_summary(report['ctranslate2'])}, "
                                f"transformers: {_summary(report['transformers'])})", out)
    return report


def _summary(r: dict) -> str:
    parts = [f"{k} {r[k]}" for k in ("greedy_equal", "beam_equal_where_finished") if k in r]
    if "max_abs_diff" in r:
        parts.insert(0, f"max |Δ logits| {r['max_abs_diff']:.2e}")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- CTranslate2
def _converter_class():
    from ctranslate2.converters import TransformersConverter

    class RunConverter(TransformersConverter):
        """CTranslate2's own converter; for a run with its own source vocabulary it registers
        that vocabulary (the Marian loader registers the target's for both sides) and keeps the
        encoder table's rows of it."""

        def __init__(self, folder: str, source_tokens: list[str] | None):
            super().__init__(folder)
            self.source_tokens = source_tokens

        def _load(self):
            spec = super()._load()
            spec.decoder.start_from_zero_embedding = False  # Marian's; ours starts from <bos>
            spec.config.decoder_start_token = BOS
            if self.source_tokens is not None:
                spec._vocabularies["source"] = [list(self.source_tokens)]
                emb = spec.encoder.embeddings[0]
                emb.weight = emb.weight[: len(self.source_tokens)]
                # the loader drops Marian's last row only where a table has the encoder's size
                n = len(spec._vocabularies["target"][0])
                dec, proj = spec.decoder.embeddings, spec.decoder.projection
                dec.weight, proj.weight = dec.weight[:n], proj.weight[:n]
                if proj.has_bias():
                    proj.bias = proj.bias[:n]
            return spec

    return RunConverter


def convert(hf_dir: Path, ct2_dir: Path, meta: dict, quantization: str | None = None) -> None:
    source_tokens = None
    if not meta["shared_vocabulary"]:
        vocab = json.loads((hf_dir / SOURCE_DIR / "tokenizer.json").read_text(encoding="utf-8"))
        source_tokens = vocab_list(vocab)
    _converter_class()(str(hf_dir), source_tokens).convert(str(ct2_dir), quantization=quantization, force=True)
