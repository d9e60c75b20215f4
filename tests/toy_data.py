"""Toy labelled data shared by the tests (importable because tests/conftest.py puts tests/ on sys.path)."""
import random


SPORT, MONEY, FILL = "球赛队胜负冠军进攻", "股市涨跌银行利率基金", "今日消息新的一"


def headlines(n, seed):
    """`n` (headline, label) pairs of two topics (体育 / 财经): the characters give the label away."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["体育", "财经"])
        chars = SPORT if label == "体育" else MONEY
        rows.append(("".join(rng.choice(chars + FILL) for _ in range(rng.randint(3, 12))), label))
    return rows


def write_tsv(path, rows):
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in rows), encoding="utf-8")


def write_reviews_tsv(path, n, seed=0, words_per_text=(6, 6), filler=("the", "movie", "was")):
    """`n` two-class toy reviews with a `text\\tlabel` header: the words give the label away
    (good/great/fine vs bad/awful/poor) among filler words; each text has a length drawn from
    `words_per_text` (a fixed length draws nothing, so the same seed writes the same file)."""
    rng = random.Random(seed)
    lines = ["text\tlabel"]
    for _ in range(n):
        label = rng.choice(["pos", "neg"])
        words = ["good", "great", "fine"] if label == "pos" else ["bad", "awful", "poor"]
        low, high = words_per_text
        length = low if low == high else rng.randint(low, high)
        lines.append(" ".join(rng.choice(words + list(filler)) for _ in range(length)) + f"\t{label}")
    path.write_text("\n".join(lines) + "\n")


TINY_ENCODER = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=4", "--set",
                "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=2", "--set", "train.progress=false"]


def train_toy_classifier(d):
    """A tiny two-topic classifier (`headlines`) trained in `d/run` in seconds; returns the run."""
    from scratchformer.cli import main

    write_tsv(d / "train.tsv", headlines(240, 0))
    write_tsv(d / "test.tsv", headlines(40, 1))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"), "--out", str(out),
                 "--set", "ensemble=1", "--set", "model.encoder.dropout=0.0", "--set", "train.epochs=5",
                 "--set", "train.lr=3e-3", "--set", "data.batch_size=16", "--set", "model.bigram_buckets=64",
                 "--set", "data.max_len=24", "--no-baseline"] + TINY_ENCODER) == 0
    return out


def train_toy_lm(d, steps=10):
    """A tiny character LM on `d/text.txt` (random 天地人和春夏秋冬 lines) trained in `d/run`; returns the run."""
    from scratchformer.cli import main

    rng = random.Random(0)
    (d / "text.txt").write_text("\n".join("".join(rng.choice("天地人和春夏秋冬") for _ in range(30)) for _ in range(60)),
                                encoding="utf-8")
    out = d / "run"
    assert main(["train", "lm", "--data", str(d / "text.txt"), "--out", str(out), "--set", "data.context=16",
                 "--set", "data.batch_size=8", "--set", "data.eval_windows=10", "--set", f"train.max_steps={steps}",
                 "--set", f"train.eval_every={steps}", "--set", "train.warmup_steps=2", "--set",
                 "model.encoder.n_heads=2"] + TINY_ENCODER[:2] + TINY_ENCODER[4:]) == 0
    return out


def train_toy_translator(d, *extra):
    """A tiny word-level translator (copy in upper case) trained in `d/run` from 200 toy pairs; returns the run.
    `extra`: more arguments of `train translate` (a later --set wins)."""
    from scratchformer.cli import main

    rng = random.Random(0)
    words = "ab cd ef gh ij kl".split()

    def pairs(n):
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) for _ in range(n)]
        return "".join(f"{s}\t{s.upper()}\n" for s in src)

    for name, n in (("train", 200), ("valid", 20), ("test", 20)):
        (d / f"{name}.tsv").write_text(pairs(n))
    out = d / "run"
    assert main(["train", "translate", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--test", str(d / "test.tsv"), "--out", str(out),
                 "--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
                 "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=1",
                 "--set", "data.src_tokenizer=word", "--set", "data.tgt_tokenizer=word", "--set", "data.max_tokens=300",
                 "--set", "train.epochs=2", "--set", "train.progress=false", "--set", "average_last=1",
                 "--set", "decode.beam=1", *extra]) == 0
    return out


def upper_case_pairs(n, seed, words, longest):
    """`n` toy translation pairs: 2 to `longest` of `words`, and the same words upper-cased."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        src = [rng.choice(words) for _ in range(rng.randint(2, longest))]
        out.append((" ".join(src), " ".join(w.upper() for w in src)))
    return out


def write_pairs(path, pairs):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
