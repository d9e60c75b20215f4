"""The decoder stack (the Annotated Transformer's Decoder, forward(x, memory, src_mask, tgt_mask)) is
checked for its end like the encoder (issue 51): one final norm after Pre-LN layers; without it the
file used to pass (exit 0). Its final-norm test is not judged beside a bug named above it."""
import importlib.util
import sys
from pathlib import Path

from scratchformer.check import check_module

STYLE = Path(__file__).parent / "corpus" / "styles" / "annotated.py"
DECODER_END = "            x = layer(x, memory, src_mask, tgt_mask)\n        return self.norm(x)"


def check(tmp_path, old: str = "", new: str = ""):
    src = STYLE.read_text(encoding="utf-8")
    if old:
        assert src.count(old) == 1
        src = src.replace(old, new)
    path = tmp_path / f"annotated_{abs(hash(src))}.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        return check_module(mod, lang="en")
    finally:
        sys.modules.pop(spec.name, None)


def decoder(r):
    return next(c for c in r.components if c.kind == "decoder")


def test_correct_decoder_stack_is_checked_and_ok(tmp_path):
    r = check(tmp_path)
    assert r.exit_code == 0, r.text("en")
    assert (decoder(r).name, decoder(r).status) == ("Decoder", "ok")


def test_missing_final_norm_in_decoder_is_named_there(tmp_path):
    r = check(tmp_path, DECODER_END, DECODER_END.replace("return self.norm(x)", "return x"))
    assert r.exit_code == 1
    assert r.bug_ids() == ["missing-final-norm"]
    assert (decoder(r).status, decoder(r).ids) == ("differs", ["missing-final-norm"])


def test_final_norm_twice_in_decoder_is_extra(tmp_path):
    r = check(tmp_path, DECODER_END, DECODER_END.replace("return self.norm(x)", "return self.norm(self.norm(x))"))
    assert r.bug_ids() == ["extra-final-norm"]
    assert decoder(r).ids == ["extra-final-norm"]


def test_final_norm_not_judged_beside_a_wrong_layer_norm(tmp_path):
    r = check(tmp_path, "mean = x.mean(-1, keepdim=True)", "mean = x.mean(0, keepdim=True)")
    assert decoder(r).status == "skipped"
    assert "extra-final-norm" not in r.bug_ids() and "missing-final-norm" not in r.bug_ids()
