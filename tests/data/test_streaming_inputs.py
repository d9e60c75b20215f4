"""`predict --file`, `embed --file`: a file streams in blocks with the output of one call on all of it."""
import io
import json

import numpy as np
import pytest
import torch

from scratchformer.cli import main
from scratchformer.commands import common, embed as embed_cmd
from scratchformer.commands.common import read_inputs, stream_inputs
from scratchformer.errors import UserError


def test_stream_inputs_gives_read_inputs_lines_and_errors(tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"\xef\xbb\xbf first\r\nsecond\rthird\x0bfourth\n\n  \n" + "fifth\u2028sixth\u2028seventh\n".encode("utf-8"))
    assert list(stream_inputs([], str(f))) == read_inputs([], str(f))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xef\xbb\n")
    with pytest.raises(UserError) as a:
        list(stream_inputs([], str(bad)))
    with pytest.raises(UserError) as b:
        read_inputs([], str(bad))
    assert str(a.value) == str(b.value)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(UserError, match="no non-empty input lines"):
        list(stream_inputs([], str(empty)))


class _Tok:
    model_max_length = 512

    def with_prefix(self, prefix):
        return self


class _Model:
    """An embedder whose vector of a text depends on the text alone."""

    def __init__(self):
        self.calls = []

    def embed(self, texts, tok, batch_size=32, max_length=None):
        self.calls.append(len(texts))
        return torch.tensor([[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts])


def test_embed_file_streams_in_blocks_into_the_same_files(tmp_path, monkeypatch, capsys):
    model = _Model()
    monkeypatch.setattr(embed_cmd, "_load", lambda name, *compute: (model, _Tok()))
    monkeypatch.setattr(embed_cmd, "STREAM_BLOCK", 4)
    texts = [f"line {i} " + "x" * (i % 5) for i in range(11)]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(texts) + "\n", encoding="utf-8")
    want = model.embed(["head"] + texts, None).numpy().astype(np.float32)
    model.calls.clear()
    assert main(["embed", "head", "--file", str(f), "--out", str(tmp_path / "v.npy"), "--model", "stub"]) == 0
    assert model.calls == [4, 4, 4]  # streamed
    buf = io.BytesIO()
    np.save(buf, want)
    assert (tmp_path / "v.npy").read_bytes() == buf.getvalue()
    assert main(["embed", "head", "--file", str(f), "--out", str(tmp_path / "v.jsonl"), "--model", "stub"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in rows] == ["head"] + texts and np.allclose([r["embedding"] for r in rows], want)
    capsys.readouterr()
    assert main(["embed", "--file", str(f), "--model", "stub"]) == 0
    assert [json.loads(x)["text"] for x in capsys.readouterr().out.splitlines()] == texts
    assert main(["embed", "--file", str(tmp_path / "missing.txt"), "--model", "stub"]) == 2
