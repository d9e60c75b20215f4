"""`doctor` judges the weights it loads by the batches those weights were trained on: a token whose
first training batch comes after the saved (best) step still has its initial row, and that is no
fault. Judged against the whole training data, the same healthy run would get an error."""
import torch

from scratchformer.diagnostics import inspection
from scratchformer.diagnostics.doctor import examine
from scratchformer.train.checkpoint import read_weights_metadata

RARE = "罕"


def test_a_token_first_seen_after_the_saved_step_is_not_an_untrained_row(late_token_run):
    run = late_token_run
    meta = read_weights_metadata(run / "model.safetensors")  # where in the batch stream the best model was saved
    assert {"step", "epoch", "batch_in_epoch"} <= set(meta) and meta["epoch"] == "0"
    assert int(meta["batch_in_epoch"]) == int(meta["step"]) <= 10

    subject = inspection.load(run).subject(None, "valid", 16)
    [table] = subject.embeddings
    i = inspection.load(run).clf.tokenizer.token_to_id(RARE)
    assert int(table.data_counts[i]) == 1 and int(table.train_counts[i]) == 0  # in the data, after the saved step
    assert table.saved_step == int(meta["step"])
    [emb] = examine(subject, plots=False).by_key("embedding_rows")
    assert emb.level == "ok" and emb.title == "token embedding: every row seen before the saved step was trained"
    assert f"came after the saved weights (step {meta['step']})" in emb.measured and repr(RARE) in emb.measured

    table.train_counts = table.data_counts  # the old judgement: counts over the whole training data
    table.token_dropout = 0.0  # (and no token dropout that could have hidden its one occurrence)
    [old] = examine(subject, plots=False).by_key("embedding_rows")
    assert old.level == "error" and RARE in old.where
