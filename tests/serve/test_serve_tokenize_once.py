"""A served text is tokenized once: the ids counted for the input limit travel with the text to
the batch that classifies or translates it, or to the generation that continues it (issue 52,
item 6)."""
import httpx

from conftest import TEXTS, running, start, wait_ready
from scratchformer.serve.backends import ClassifierBackend, LanguageModelBackend, TranslatorBackend


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


def _count_encodes(tok, monkeypatch) -> list:
    calls = []
    encode = tok.encode
    monkeypatch.setattr(tok, "encode", lambda text, *a, **kw: calls.append(text) or encode(text, *a, **kw))
    return calls


def test_a_translated_text_is_tokenized_once_from_the_limit_to_the_batch(mt_run, monkeypatch):
    backend = TranslatorBackend("mt", mt_run)
    src = ["ab cd", " ef gh ij ", "kl ab"]
    want = backend.model.translate(src, beam=2, max_output_len=12)
    calls = _count_encodes(backend.model.src_tok, monkeypatch)
    app, cfg = start([backend], max_wait_ms=2)
    with running(app, cfg) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/translate", json={"model": "mt", "input": src, "beam": 2, "max_length": 12},
                       timeout=30)
        assert r.status_code == 200, r.text
        assert [d["translation"] for d in r.json()["data"]] == want
        assert sorted(calls) == sorted(t.strip() for t in src)  # once each, as the encoder reads it


def test_a_completed_prompt_is_tokenized_once_from_the_limit_to_the_generation(lm_run, monkeypatch):
    backend = LanguageModelBackend("lm", lm_run)
    want = backend.model.generate("天地", max_new_tokens=6, temperature=0.0)
    calls = _count_encodes(backend.model.tokenizer, monkeypatch)
    app, cfg = start([backend], max_new_tokens=16)
    with running(app, cfg) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/completions", json={"model": "lm", "prompt": "天地", "max_tokens": 6,
                                                       "temperature": 0.0}, timeout=30)
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["text"]
        assert text == want
        # the prompt once (limit, sampler check and generation read its ids), then the output once
        # (its token count for `usage`)
        assert calls == ["天地"] + ([text] if text else [])
