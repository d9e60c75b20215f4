"""The oneDNN projection is a `torch.library` custom op with a fake implementation, so torch.compile
traces through `linear` (before: Inductor asserted on `mkldnn._linear_pointwise`)."""
import pytest
import torch

from scratchformer.nn import Encoder, TransformerConfig
from scratchformer.nn import fast_linear


@pytest.mark.skipif(fast_linear._KERNEL is None, reason="this torch build has no oneDNN linear kernel")
def test_onednn_linear_custom_op_passes_opcheck_and_dynamo_traces_the_encoder():
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 5, 16), torch.randn(24, 16), torch.randn(24)
    torch.library.opcheck(torch.ops.scratchformer.onednn_linear.default, (x, w, b),
                          test_utils=("test_schema", "test_faketensor"))
    enc = Encoder(TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.1)).eval()
    src = torch.randn(2, 7, 32)
    graphs = []

    def backend(gm, example_inputs):  # Dynamo only (no Inductor: seconds, not minutes)
        graphs.append(gm)
        return gm.forward

    with torch.no_grad():
        want = enc(src)
        got = torch.compile(enc, backend=backend, fullgraph=True)(src)
    assert float((got - want).abs().max()) < 1e-5
    ops = {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}
    assert "scratchformer.onednn_linear" in ops  # traced as the custom op, not graph-broken
