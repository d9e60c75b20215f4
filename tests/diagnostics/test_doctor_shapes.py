"""`doctor` raises no false error on healthy short runs of several shapes (issue 33, rule 10):
"rows never updated" accounts for the step the weights were saved at (an early best checkpoint),
token dropout (a rare token's every occurrence may have become <unk>), gradient accumulation
(batches of an unfinished step), tiny data and a single epoch. A small grid, each run seconds."""
import json

import pytest
from toy_data import headlines, write_tsv

from scratchformer.cli import main

BASE = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
        "--set", "model.encoder.n_layers=1", "--set", "data.batch_size=8", "--set", "ensemble=1",
        "--set", "train.progress=false", "--no-baseline"]

SHAPES = {
    "token dropout": (160, ["--set", "model.token_dropout=0.3", "--set", "train.epochs=2"]),
    "early best checkpoint": (160, ["--set", "train.eval_every=2", "--set", "train.max_steps=24",
                                    "--set", "train.lr=0.05", "--set", "train.warmup_steps=0"]),
    "tiny data": (24, ["--set", "train.epochs=2"]),
    "one epoch": (160, ["--set", "train.epochs=1"]),
    "accumulation": (160, ["--set", "train.accumulation=3", "--set", "train.eval_every=5",
                           "--set", "train.max_steps=10"]),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_doctor_finds_no_error_on_a_healthy_short_run(shape, tmp_path, capsys):
    n, sets = SHAPES[shape]
    write_tsv(tmp_path / "train.tsv", headlines(n, 0) + [("罕见的字只出现一次", "体育")])  # rare characters
    out = tmp_path / "run"
    assert main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--out", str(out), *BASE, *sets]) == 0
    capsys.readouterr()
    assert main(["doctor", str(out), "--samples", "12", "--json", "--split", "train"]) == 0
    found = json.loads(capsys.readouterr().out)["findings"]
    errors = [(f["title"], f.get("measured")) for f in found if f["level"] == "error"]
    assert errors == [], (shape, errors)
    rows = [f for f in found if f["key"] == "embedding_rows"]
    assert rows and all(f["level"] != "error" for f in rows)


def test_token_dropout_is_what_excuses_a_rarely_seen_row():
    import torch

    from scratchformer.diagnostics.probes import unchanged_rows
    from scratchformer.tasks.inspection import EmbeddingTable

    w0 = torch.randn(8, 4, dtype=torch.float64)
    w = w0.clone()
    w[5:] += 0.1 * torch.randn(3, 4, dtype=torch.float64)  # rows 5.. trained; rows 0..4 still initial
    counts = torch.tensor([0, 0, 0, 2, 40, 9, 9, 9])

    def table(p):
        return EmbeddingTable("t", w, w0, counts, str, {0, 1, 2}, data_counts=counts, token_dropout=p)
    assert unchanged_rows(table(0.0))["seen"] == [3, 4]  # no dropout: both are errors
    rows = unchanged_rows(table(0.3))  # 0.3^2 = 0.09 >= 1e-3: maybe all dropped; 0.3^40: never
    assert rows["dropped"] == [3] and rows["seen"] == [4]
