"""The foundation's layout says what the design means: the paper's equation file (nn/attention.py)
imports nothing of ours above it, nn/ has no import circle, and the public names renamed on the way
keep working with a DeprecationWarning (CHANGELOG.md)."""
import ast
import warnings
from pathlib import Path

import pytest
import torch

import scratchformer.nn as snn
from scratchformer.nn import attention

NN = Path(snn.__file__).parent


def nn_imports(path: Path) -> set[str]:
    """The modules of scratchformer.nn that `path` imports (module-level and inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x
                found.update(a.name for a in node.names)
            elif node.level == 0 and (node.module or "").startswith("scratchformer.nn."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("scratchformer.nn."))
    return found - {"__init__"}


def graph() -> dict[str, set[str]]:
    return {p.stem: nn_imports(p) for p in NN.glob("*.py") if p.stem != "__init__"}


def test_attention_py_imports_only_the_leaves_below_it():
    g = graph()
    # what attention.py may use: masks, the cache class and the packed-tokens record, none of which
    # imports anything of ours back
    assert nn_imports(NN / "attention.py") == {"cache", "masks", "packing"}
    for leaf in ("cache", "masks", "packing"):
        assert g[leaf] == set(), leaf
    assert "attention" in g["multihead"] and "attention" in g["window"]


def test_nn_has_no_import_cycle():
    g = graph()
    done, stack = set(), []

    def visit(m):
        if m in stack:
            raise AssertionError("import cycle in nn/: " + " -> ".join(stack[stack.index(m):] + [m]))
        if m in done:
            return
        stack.append(m)
        for dep in sorted(g.get(m, ())):
            visit(dep)
        stack.pop()
        done.add(m)

    for m in sorted(g):
        visit(m)
    assert len(done) == len(g) >= 12


def test_the_cycle_detector_sees_a_planted_cycle(tmp_path):
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    assert nn_imports(tmp_path / "a.py") == {"b"} and nn_imports(tmp_path / "b.py") == {"a"}


def test_multiheadattention_from_nn_attention_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"scratchformer\.nn\.attention\.MultiHeadAttention is deprecated"):
        cls = attention.MultiHeadAttention
    assert cls is snn.MultiHeadAttention
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        attention.NoSuchThing  # noqa: B018


def test_sdpa_old_mask_keyword_warns_and_gives_identical_outputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
    mask = torch.rand(2, 1, 5, 5, generator=g) > 0.3
    new, w_new = snn.scaled_dot_product_attention(q, k, v, attn_mask=mask, need_weights=True)
    with pytest.warns(DeprecationWarning, match=r"scaled_dot_product_attention\(mask=\.\.\.\) is deprecated: "
                                                r"the keyword is now attn_mask="):
        old, w_old = snn.scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    assert torch.equal(new, old) and torch.equal(w_new, w_old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns nothing
        snn.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with pytest.raises(TypeError, match=r"got both mask= and attn_mask=; pass attn_mask= only"):
        snn.scaled_dot_product_attention(q, k, v, mask=mask, attn_mask=mask)
