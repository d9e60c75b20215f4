"""Toy labelled data shared by the tests (importable because tests/conftest.py puts tests/ on sys.path)."""
import random


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
