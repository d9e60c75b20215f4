"""`scratchformer export RUN --format transformers|ctranslate2` for translation runs: the folder
loads in transformers (Marian for Post-LN, Pegasus for Pre-LN) and CTranslate2, and both give
our translations token for token on real (HSK) sentences; the tokenizer files give our ids."""
import json

import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError

transformers = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2", reason="pip install -e '.[test]' brings ctranslate2")

SETS = ["--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
        "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=2",
        "--set", "model.transformer.n_decoder_layers=1", "--set", "model.transformer.dropout=0.0",
        "--set", "data.max_tokens=600", "--set", "train.epochs=1", "--set", "train.progress=false",
        "--set", "average_last=1", "--set", "decode.beam=4", "--set", "decode.precision=fp32",
        "--set", "data.bleu_sentences=4"]


def _hsk_files(d):
    from scratchformer.data.registry import get_dataset

    data = get_dataset("hsk-zh-en").load()
    files = {}
    for name, pairs in (("train", data.train[:240]), ("valid", data.valid[:6]), ("test", data.test[:10])):
        files[name] = d / f"{name}.tsv"
        files[name].write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return files


def _train(d, files, *extra):
    out = d / "run"
    assert main(["train", "translate", "--data", str(files["train"]), "--valid", str(files["valid"]),
                 "--test", str(files["test"]), "--out", str(out), *SETS, *extra]) == 0
    return out


@pytest.fixture(scope="module")
def hsk(tmp_path_factory):
    return _hsk_files(tmp_path_factory.mktemp("hsk"))


@pytest.fixture(scope="module")
def post_ln(tmp_path_factory, hsk):
    """Post-LN, char source / BPE target (separate vocabularies): the hsk-base layout."""
    return _train(tmp_path_factory.mktemp("post"), hsk, "--set", "model.transformer.norm_first=false",
                  "--set", "data.src_tokenizer=char", "--set", "data.tgt_tokenizer=bpe",
                  "--set", "data.tgt_vocab_size=300")


@pytest.fixture(scope="module")
def pre_ln(tmp_path_factory, hsk):
    """Pre-LN, one joint BPE vocabulary, one shared table: the en-fr-base layout."""
    return _train(tmp_path_factory.mktemp("pre"), hsk, "--set", "data.src_tokenizer=bpe",
                  "--set", "data.tgt_tokenizer=bpe", "--set", "data.joint_vocab=true",
                  "--set", "data.src_vocab_size=400", "--set", "model.share_embeddings=true")


@pytest.fixture(scope="module")
def sources(hsk):
    return [line.split("\t")[0] for line in hsk["test"].read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("kind,arch", [("post_ln", "MarianMTModel"), ("pre_ln", "PegasusForConditionalGeneration")])
def test_ctranslate2_export_translates_like_ours(kind, arch, request, tmp_path, sources):
    """The command's own check (recorded in export.json), then the folder used the way a user
    would: the tokenizer files make the source tokens, CTranslate2 translates, the target
    tokenizer decodes; the strings equal our Translator's, greedy and beam 4."""
    from tokenizers import Tokenizer as HF

    from scratchformer.tasks.translate import Translator
    from scratchformer.tasks.translate.export_check import limits_of

    run = request.getfixturevalue(kind)
    out = tmp_path / "ct2"
    assert main(["export", str(run), "--format", "ctranslate2", "--out", str(out)]) == 0
    meta = json.loads((out / "export.json").read_text())
    assert meta["architecture"] == arch
    for engine in ("transformers", "ctranslate2"):
        p = meta["parity"][engine]
        assert p["n_sentences"] == 10 and p["greedy_equal"] and p["beam_equal_where_finished"], p
        assert p["beam_sentences_equal"] >= 9, p  # where none finishes, the kept cut-off may differ (docs)
    assert meta["parity"]["transformers"]["max_abs_diff"] <= 1e-4
    tr = Translator.load(run)
    src = HF.from_file(str(out / meta["source_tokenizer"]))
    tgt = HF.from_file(str(out / "tokenizer.json"))
    ct2 = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    tokens = [src.encode(s, add_special_tokens=False).tokens + ["<eos>"] for s in sources]
    ours = tr.hypotheses(sources, beam=1)
    for toks, hyp, limit in zip(tokens, ours, limits_of(tr, sources)):  # our per-sentence length limit
        res = ct2.translate_batch([toks], beam_size=1, max_decoding_length=limit)[0].hypotheses[0]
        assert tgt.decode([tgt.token_to_id(t) for t in res]) == tr.tgt_tok.decode(hyp.tokens)
    # `serve --backend ctranslate2`: the backend answers like our Translator (greedy)
    from scratchformer.serve.backends import ModelSpec, load_backend

    backend = load_backend(ModelSpec("mt", str(out)), "ctranslate2")
    assert backend.describe()["backend"] == "ctranslate2"
    key = backend.decode_key(1, None)
    assert backend.translate(sources, key) == [tr.tgt_tok.decode(h.tokens) for h in ours]
    # a served text is tokenized once: the tokens counted for the limit are the ones translated
    carried, counts = backend.tokenize(list(sources))
    assert counts == backend.count_tokens(sources)
    calls, tokens_of = [], backend.model.tokens
    backend.model.tokens = lambda text: calls.append(text) or tokens_of(text)
    assert backend.translate(carried, key) == [tr.tgt_tok.decode(h.tokens) for h in ours] and calls == []


def test_transformers_folder_loads_and_matches_logits(post_ln, tmp_path, sources):
    """AutoModelForSeq2SeqLM + AutoTokenizer load the folder; the source tokenizer gives our
    ids on real text; teacher-forced logits within 1e-4 of ours; the position table is ours
    up to the sin|cos permutation."""
    from scratchformer.nn.position import sinusoidal_table
    from scratchformer.tasks.translate import Translator
    from scratchformer.tasks.translate.export_check import check_transformers
    from scratchformer.tasks.translate.hf_layout import residual_permutation

    out = tmp_path / "hf"
    assert main(["export", str(post_ln), "--format", "transformers", "--out", str(out), "--no-check"]) == 0
    tr = Translator.load(post_ln)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out))
    assert type(hf).__name__ == "MarianMTModel" and hf.config.scale_embedding
    assert not hf.config.share_encoder_decoder_embeddings  # char source, BPE target
    pe = hf.model.encoder.embed_positions.weight[:64].detach()
    assert float((pe - sinusoidal_table(64, 32)[:, residual_permutation(32)]).abs().max()) < 1e-5
    src_tok = transformers.AutoTokenizer.from_pretrained(str(out / "source"))
    tgt_tok = transformers.AutoTokenizer.from_pretrained(str(out))
    texts = sources + ["Hello, 世界! 123", "  多 空格  "]
    assert [src_tok.encode(t, add_special_tokens=False) for t in texts] == tr.src_tok.encode_batch(texts)
    refs = ["I love you.", "He didn't go to school today, did he?"]
    assert [tgt_tok.encode(t, add_special_tokens=False) for t in refs] == tr.tgt_tok.encode_batch(refs)
    rep = check_transformers(tr, out, sources[:6])
    assert rep["max_abs_diff"] <= 1e-4 and rep["greedy_equal"], rep


def test_word_tokenizer_json_gives_our_ids(sources):
    from tokenizers import Tokenizer as HF

    from scratchformer.data.tokenizers import CharTokenizer, WordTokenizer
    from scratchformer.tasks.translate.hf_layout import tokenizer_json

    texts = sources + ["Hello, world! It's 3.5 o'clock...", "don't   stop\tnow"]
    for tok in (WordTokenizer.train(texts[::2], segmenter="regex"), CharTokenizer.train(texts[::2], lowercase=True)):
        names = [tok.id_to_token(i) for i in range(tok.vocab_size)]
        hf = HF.from_str(tokenizer_json(tok, names))
        assert [hf.encode(t, add_special_tokens=False).ids for t in texts] == tok.encode_batch(texts)
        ids = tok.encode(texts[0])  # a training text: no <unk> (which HF's decode drops as a special)
        assert hf.decode(ids) == tok.decode(ids)


def test_runs_that_cannot_be_exported_say_why(post_ln, tmp_path, capsys):
    def error(*args):
        capsys.readouterr()
        assert main(["export", *map(str, args)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
        return err[len("error: "):]

    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "config.json").write_text(json.dumps({"task": "lm"}))
    assert error(tmp_path / "lm", "--format", "ctranslate2", "--out", tmp_path / "o1") == (
        f"{tmp_path / 'lm'} holds a 'lm' run; --format ctranslate2 exports translation runs "
        "(classify and lm runs: --format onnx)")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert error(post_ln, "--format", "transformers", "--out", tmp_path / "taken") == (
        f"{tmp_path / 'taken'} is not empty: give a new folder to --out")
    ens = tmp_path / "ens"
    ens.mkdir()
    (ens / "config.json").write_text((post_ln / "config.json").read_text())
    (ens / "members.json").write_text("[]")
    assert error(ens, "--format", "ctranslate2", "--out", tmp_path / "o2").startswith(f"{ens} is an ensemble run")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for f in post_ln.iterdir():
        if f.is_file():
            (unfinished / f.name).write_bytes(f.read_bytes())
    (unfinished / "train_status.json").write_text(json.dumps({"finished": False, "step": 3}))
    msg = error(unfinished, "--format", "transformers", "--out", tmp_path / "o3")
    assert "--resume" in msg and "\n" not in msg
    assert not (tmp_path / "o3").exists()


def test_layouts_without_a_transformers_twin_are_refused():
    from scratchformer.tasks.translate.hf_layout import layout_of
    from scratchformer.tasks.translate.recipe import TranslateRecipe

    def why(**tc):
        r = TranslateRecipe()
        d = r.to_dict()
        d["model"]["transformer"].update(tc)
        with pytest.raises(UserError) as e:
            layout_of(TranslateRecipe.from_dict(d))
        return str(e.value)

    assert why(position="rope").endswith("its positions are 'rope'; Marian and Pegasus have sinusoidal ones")
    assert "separate source/target embeddings" in why(norm_first=True)
    assert "final norm" in why(norm_first=False, final_norm=True)
    assert "activation" in why(norm_first=False, activation="swiglu")


def test_a_failed_parity_check_writes_nothing(post_ln, tmp_path, monkeypatch, capsys):
    from scratchformer.tasks.translate import export

    bad = {"n_sentences": 1, "max_abs_diff": 0.5, "greedy_equal": False, "beam_equal_where_finished": True}
    monkeypatch.setattr(export, "check_transformers", lambda *a, **k: {**bad, "equal": False})
    out = tmp_path / "bad"
    assert main(["export", str(post_ln), "--format", "transformers", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "the transformers export differs from our model (max |Δ logits| 5.00e-01, greedy_equal False, "
        f"beam_equal_where_finished True); {out} not written (`scratchformer export ... --no-check` writes it "
        "anyway, unchecked)")
    assert not out.exists()
