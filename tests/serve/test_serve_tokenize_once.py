"""A served text is tokenized once: the ids counted for the input limit travel with the text to
the batch that classifies it (issue 52, item 6)."""
import httpx

from conftest import TEXTS, running, start, wait_ready
from scratchformer.serve.backends import ClassifierBackend


def _tokenizer_of(clf):
    inner = getattr(clf, "ours", clf)  # a blended run: ours beside the TF-IDF baseline
    return getattr(inner, "members", [inner])[0].tokenizer


def test_a_classified_text_is_tokenized_once_from_the_limit_to_the_batch(clf_run, monkeypatch):
    backend = ClassifierBackend("c", clf_run)
    want = backend.model.predict(TEXTS)
    tok = _tokenizer_of(backend.model)
    calls = []
    encode = tok.encode
    monkeypatch.setattr(tok, "encode", lambda text, *a, **kw: calls.append(text) or encode(text, *a, **kw))
    app, cfg = start([backend], max_wait_ms=2)
    with running(app, cfg) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/classify", json={"model": "c", "input": TEXTS}, timeout=30)
        assert r.status_code == 200, r.text
        assert [d["label"] for d in r.json()["data"]] == [w["label"] for w in want]
        assert sorted(calls) == sorted(TEXTS)  # once each: counted, then read from the ids carried
        calls.clear()
        r = httpx.post(url + "/v1/embeddings", json={"model": "c", "input": TEXTS[:2]}, timeout=30)
        assert r.status_code == 200 and sorted(calls) == sorted(TEXTS[:2])
