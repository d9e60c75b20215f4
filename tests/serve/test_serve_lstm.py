"""`serve` translates with an LSTM translator (`model.kind=lstm`) as with the Transformer: the
route calls the same `Translator`, so the answer is the Python API's, token for token."""
import httpx
from conftest import running, wait_ready
from toy_data import train_toy_translator

from scratchformer.serve.app import create_app
from scratchformer.serve.backends import TranslatorBackend
from scratchformer.serve.state import ServeConfig


def test_serve_translates_with_an_lstm_run(tmp_path):
    run = train_toy_translator(tmp_path, "--set", "model.kind=lstm", "--set", "model.transformer.n_decoder_layers=1")
    backend = TranslatorBackend("mt", run)
    src = ["ab cd", "ef gh ij"]
    with running(create_app(lambda: [backend], ServeConfig())) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/translate", json={"input": src, "beam": 2, "max_length": 12}, timeout=30)
    assert r.status_code == 200
    assert [d["translation"] for d in r.json()["data"]] == backend.tr.translate(src, beam=2, max_output_len=12)
    assert type(backend.tr.model).__name__ == "LSTMSeq2Seq"
