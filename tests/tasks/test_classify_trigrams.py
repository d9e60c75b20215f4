"""Hashed character trigrams (`model.trigram_buckets`): the embedding of a packed id is exactly
token + bigram + trigram lookups, a trigram run trains, saves and predicts what it tested, and
every setting it cannot honour is refused with a one-line error."""
import pytest
import torch

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.models.classifier import ClassifierConfig
from scratchformer.models.embedding import Embeddings
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.classify import Classifier
from toy_data import headlines, write_tsv


def test_packed_ids_embed_as_the_sum_of_three_lookups():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0, position="none")
    emb = Embeddings(50, cfg, bigram_buckets=97, trigram_buckets=31).eval()
    ids = torch.randint(0, 50, (3, 7))  # (B, T)
    bi, tri = torch.randint(0, 97, (3, 7)), torch.randint(0, 31, (3, 7))
    got = emb(ids, bi + 97 * tri)
    want = (emb.tokens(ids) + emb.bigrams(bi) + emb.trigrams(tri)) * 16 ** 0.5
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert emb.trigrams.weight[0].abs().sum() == 0  # bucket 0 (specials, padding) is zero
    only_bigrams = Embeddings(50, cfg, bigram_buckets=97).eval()
    only_bigrams.load_state_dict({k: v for k, v in emb.state_dict().items() if not k.startswith("trigrams")})
    torch.testing.assert_close(only_bigrams(ids, bi), emb(ids, bi), rtol=0, atol=1e-6)  # trigram 0 adds nothing


def test_bad_trigram_settings_are_refused():
    with pytest.raises(UserError, match="needs model.bigram_buckets"):
        ClassifierConfig(trigram_buckets=100)
    with pytest.raises(UserError, match=r"must be 0 \(off\) or >= 2"):
        ClassifierConfig(bigram_buckets=100, trigram_buckets=1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tri")
    write_tsv(d / "train.tsv", headlines(200, 0))
    write_tsv(d / "test.tsv", headlines(40, 1))
    return d


TINY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=64",
        "--set", "model.encoder.n_layers=1", "--set", "train.epochs=3", "--set", "train.lr=3e-3",
        "--set", "data.batch_size=16", "--set", "train.progress=false", "--set", "ensemble=1", "--no-baseline"]


def test_a_trigram_run_trains_and_predicts_what_it_tested(files, capsys):
    out = files / "run"
    assert main(["train", "classify", "--data", str(files / "train.tsv"), "--test", str(files / "test.tsv"),
                 "--out", str(out), "--set", "data.tokenizer=char", "--set", "model.bigram_buckets=101",
                 "--set", "model.trigram_buckets=103"] + TINY) == 0
    clf = Classifier.load(out, blend=False)
    assert clf.tokenizer.trigram_buckets == 103 and clf.model.embed.trigrams.num_embeddings == 103
    batch = clf._batch(["央行宣布下调存款准备金率"])
    assert batch.bigrams.max() >= 101  # packed: a trigram bucket >= 1 on every character
    assert (batch.bigrams[batch.ids != 0] // 101 >= 1).all()
    test = [line.split("\t") for line in (files / "test.tsv").read_text(encoding="utf-8").splitlines()]
    pred = clf.predict([t for _, t in test] if test[0][0] in clf.labels else [t for t, _ in test])
    assert len(pred) == len(test)


@pytest.mark.parametrize("extra,message", [
    (["--set", "data.tokenizer=word"], "it needs data.tokenizer=char"),
])
def test_trigrams_need_characters(files, extra, message, capsys):
    assert main(["train", "classify", "--data", str(files / "train.tsv"), "--out", str(files / "bad"),
                 "--set", "model.bigram_buckets=101", "--set", "model.trigram_buckets=103"] + TINY + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err and "Traceback" not in err
