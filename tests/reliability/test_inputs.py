"""Text inputs of the inference verbs (`--file`, stdin) and the small argument types."""
from __future__ import annotations

import argparse
import io

import pytest

from scratchformer.commands.common import positive_int, read_inputs
from scratchformer.errors import UserError


class _Stdin(io.TextIOWrapper):
    def isatty(self) -> bool:
        return False


def test_read_inputs_names_file_line_and_byte(tmp_path):
    path = tmp_path / "in.txt"
    data = "第一行\n\nsecond line ".encode() + b"\xe9\n"  # latin-1 in a UTF-8 file, at byte 9 + 2 + 12
    path.write_bytes(data)
    with pytest.raises(UserError) as e:
        read_inputs([], str(path))
    assert str(e.value).startswith(f"{path}:3: not valid UTF-8 at byte offset 23 (byte 0xe9)")
    with pytest.raises(UserError, match="no such file"):
        read_inputs([], str(tmp_path / "missing.txt"))
    path.write_text("a\r\n\n  \nb\n", encoding="utf-8")
    assert read_inputs([], str(path)) == ["a", "b"]
    assert read_inputs(["x"], str(path)) == ["x"]


def test_read_inputs_from_stdin_bytes(monkeypatch):
    monkeypatch.setattr("sys.stdin", _Stdin(io.BytesIO(b"ok\nbad \xff\n")))
    with pytest.raises(UserError, match=r"^<stdin>:2: not valid UTF-8 at byte offset 7"):
        read_inputs([], None)
    monkeypatch.setattr("sys.stdin", _Stdin(io.BytesIO("\ufeff你好\n".encode())))
    assert read_inputs([], None) == ["你好"]


@pytest.mark.parametrize("text, ok", [("1", 1), ("250", 250), ("0", None), ("-3", None), ("abc", None), ("2.5", None)])
def test_positive_int(text, ok):
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError, match="whole number >= 1"):
            positive_int(text)
    else:
        assert positive_int(text) == ok
