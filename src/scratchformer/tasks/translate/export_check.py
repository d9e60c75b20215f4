"""The parity checks of a translation export: the exported folder loaded by `transformers`
(teacher-forced logits within TOLERANCE of ours, greedy and beam outputs token for token) and by
CTranslate2 (greedy and beam outputs), on the run's own test sentences."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

from ...data.specials import BOS_ID, EOS_ID, PAD_ID
from .hf_layout import SOURCE_DIR, Vocab, layout_of, vocab_list

TOLERANCE = 1e-4


def check_texts(tr, n: int = 24) -> list[str]:
    """The first `n` source sentences of the run's own test split (real text)."""
    from .data import load_translation

    try:
        pairs = load_translation(tr.recipe.data).test
    except Exception:  # noqa: BLE001 - the data may be gone; the check then uses the built-in few
        pairs = []
    texts = [s for s, _ in pairs[:n]]
    return texts or ["我爱你。", "今天天气很好。", "Hello, world."]


def limits_of(tr, texts: Sequence[str]) -> list[int]:
    from .decoding import length_limits

    cfg = tr.decode_config()
    ids = tr.encode(texts, cfg)
    return [int(length_limits(torch.tensor([x]), cfg)[0]) for x in ids]


def _groups(limits: list[int], beam: int) -> list[tuple[int, list[int]]]:
    """(limit, rows) per call. Greedy is prefix-consistent, so one call to the longest limit,
    cut per sentence afterwards, is exact; beam search is not: one call per distinct limit."""
    if beam == 1:
        return [(max(limits), list(range(len(limits))))]
    return [(n, [i for i, m in enumerate(limits) if m == n]) for n in sorted(set(limits))]


def _cut(seq: list[int], limit: int) -> list[int]:
    """Output ids up to <eos> (excluded), at most `limit` tokens in all (<eos> counts), as ours."""
    seq = seq[:limit]
    return seq[: seq.index(EOS_ID)] if EOS_ID in seq else seq


def hf_generate(hf, src_ids: list[list[int]], limits: list[int], beam: int, length_penalty: float,
                pad: int) -> list[list[int]]:
    """`transformers` generate under our per-sentence length limits; output ids without the
    start token and <eos>."""
    out: list[list[int] | None] = [None] * len(src_ids)
    for limit, rows in _groups(limits, beam):
        width = max(len(src_ids[i]) for i in rows)
        ids = torch.tensor([src_ids[i] + [pad] * (width - len(src_ids[i])) for i in rows])
        mask = torch.tensor([[1] * len(src_ids[i]) + [0] * (width - len(src_ids[i])) for i in rows])
        kw = dict(length_penalty=length_penalty, early_stopping=True) if beam > 1 else {}
        with torch.no_grad():  # num_beams always: the folder's generation_config holds the recipe's beam
            gen = hf.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=limit,
                              num_beams=beam, num_return_sequences=1, **kw)
        for r, seq in zip(rows, gen.tolist()):
            out[r] = _cut([t for t in seq[1:] if t != pad], limits[r])
    return out  # type: ignore[return-value]


def check_transformers(tr, folder: Path, texts: Sequence[str] | None = None) -> dict:
    """Load `folder` with transformers; teacher-forced logits vs ours on real sentences, then
    greedy and beam (the recipe's beam and length penalty) token for token."""
    import transformers

    texts = list(texts) if texts is not None else check_texts(tr)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(folder)).eval()
    vocab = Vocab(layout_of(tr.recipe), tr.src_tok, tr.tgt_tok, tr.recipe.model.share_embeddings)
    cfg = tr.decode_config()
    src = tr.encode(texts, cfg)
    refs = [h.tokens for h in tr.hypotheses(texts, beam=1)]
    # teacher forcing on our greedy outputs: every logit the decoders compute
    from ...data.batching import pad_sequences

    s, _ = pad_sequences(src, PAD_ID)
    tgt_in, _ = pad_sequences([[BOS_ID] + r for r in refs], PAD_ID)
    with torch.no_grad():
        ours = tr.model(s, tgt_in)  # (B, T, V)
        hf_in = tgt_in.clone()
        hf_in[:, 0] = vocab.start
        theirs = hf(input_ids=s, attention_mask=(s != PAD_ID).long(), decoder_input_ids=hf_in).logits
    keep = [i for i in range(vocab.n_tgt) if i not in vocab.banned]
    real = tgt_in != PAD_ID
    real[:, 0] = True
    diff = (ours[..., keep] - theirs[..., keep]).abs()[real]
    max_diff = float(diff.max())
    limits = limits_of(tr, texts)
    greedy = hf_generate(hf, src, limits, 1, cfg.length_penalty, vocab.pad)
    beam = hf_generate(hf, src, limits, cfg.beam, cfg.length_penalty, vocab.pad)
    rep = {"n_sentences": len(texts), "max_abs_diff": max_diff, "greedy_equal": greedy == refs,
           **_beam_report(tr, texts, beam, cfg)}
    rep["equal"] = max_diff <= TOLERANCE and rep["greedy_equal"] and rep["beam_equal_where_finished"]
    return rep


def _beam_report(tr, texts, beam: list[list[int]], cfg) -> dict:
    """Beam outputs vs ours: all sentences, and those where our best hypothesis ended with
    <eos>. Where none did (the length limit cut every hypothesis), the engines keep a different
    cut-off hypothesis than ours (transformers and CTranslate2 agree with each other there)."""
    hyps = tr.hypotheses(texts)
    same = [a == h.tokens for a, h in zip(beam, hyps)]
    fin = [s for s, h in zip(same, hyps) if h.finished]
    return {"beam": cfg.beam, "length_penalty": cfg.length_penalty, "beam_sentences_equal": sum(same),
            "beam_finished_sentences": len(fin), "beam_equal_where_finished": all(fin)}


def ct2_translate(translator, tokens: list[list[str]], limits: list[int], beam: int, length_penalty: float,
                  target_names: list[str]) -> list[list[int]]:
    """CTranslate2's translate_batch under our per-sentence length limits -> target ids."""
    index = {n: i for i, n in enumerate(target_names)}
    out: list[list[int] | None] = [None] * len(tokens)
    for limit, rows in _groups(limits, beam):
        res = translator.translate_batch([tokens[i] for i in rows], beam_size=beam, length_penalty=length_penalty,
                                         max_decoding_length=limit, num_hypotheses=1)
        for r, hyp in zip(rows, res):
            out[r] = _cut([index[t] for t in hyp.hypotheses[0]], limits[r])
    return out  # type: ignore[return-value]


def check_ctranslate2(tr, folder: Path, texts: Sequence[str] | None = None) -> dict:
    import ctranslate2

    texts = list(texts) if texts is not None else check_texts(tr)
    translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=1)
    cfg = tr.decode_config()
    src_file = "tokenizer.json" if tr.recipe.model.share_embeddings else f"{SOURCE_DIR}/tokenizer.json"
    names = vocab_list(json.loads((folder / src_file).read_text(encoding="utf-8")))
    src_names = [[names[i] for i in ids] for ids in tr.encode(texts, cfg)]  # our ids as the vocabulary's names
    tgt_names = vocab_list(json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")))
    limits = limits_of(tr, texts)
    greedy = ct2_translate(translator, src_names, limits, 1, cfg.length_penalty, tgt_names)
    beam = ct2_translate(translator, src_names, limits, cfg.beam, cfg.length_penalty, tgt_names)
    refs = [h.tokens for h in tr.hypotheses(texts, beam=1)]
    rep = {"n_sentences": len(texts), "greedy_equal": greedy == refs, **_beam_report(tr, texts, beam, cfg),
           "strings_equal": [tr.tgt_tok.decode(g) for g in greedy] == [tr.tgt_tok.decode(r) for r in refs]}
    rep["equal"] = rep["greedy_equal"] and rep["beam_equal_where_finished"]
    return rep
