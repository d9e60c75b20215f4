"""Readers for the user's own files: formats, header detection, and errors naming file:line."""

import numpy as np
import pytest

from scratchformer.data.readers import read_labeled_file, read_parallel, read_text_file, seeded_split
from scratchformer.errors import UserError


def write(tmp_path, name, text, encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


# --------------------------------------------------------------------------- seeded_split


def test_seeded_split_sizes_for_thucnews():
    train, valid, test = seeded_split(list(range(10_000)), seed=0)
    assert (len(train), len(valid), len(test)) == (8000, 1000, 1000)
    assert sorted(train + valid + test) == list(range(10_000))


def test_seeded_split_is_the_fixed_permutation():
    idx = np.random.RandomState(0).permutation(10)
    items = [f"x{i}" for i in range(10)]
    train, valid, test = seeded_split(items)
    assert train == [items[i] for i in idx[:8]]
    assert valid == [items[idx[8]]]
    assert test == [items[idx[9]]]
    # And for a size where 80% is not whole: boundaries are floor(n * cumulative fraction).
    train, valid, test = seeded_split(list(range(4274)))
    assert (len(train), len(valid), len(test)) == (3419, 427, 428)


def test_seeded_split_two_parts_and_other_seed():
    a, b = seeded_split(list(range(11_293)), 0, (0.9, 0.1))
    assert (len(a), len(b)) == (10_163, 1_130)
    assert seeded_split(list(range(50)), seed=1) != seeded_split(list(range(50)), seed=0)
    assert seeded_split(list(range(50)), seed=1) == seeded_split(list(range(50)), seed=1)


@pytest.mark.parametrize("fractions", [(0.5, 0.1), (0.9, 0.2, -0.1), ()])
def test_seeded_split_rejects_bad_fractions(fractions):
    with pytest.raises(UserError, match="sum to 1"):
        seeded_split([1, 2, 3], 0, fractions)


# --------------------------------------------------------------------------- labelled files


def test_headerless_tsv_is_label_then_text(tmp_path):
    p = write(tmp_path, "news.tsv", "sports\t湖人 获胜\n\nfinance\t股市 上涨 \n")
    assert read_labeled_file(p) == [("湖人 获胜", "sports"), ("股市 上涨", "finance")]


def test_header_row_is_recognised_in_any_order(tmp_path):
    p = write(tmp_path, "d.tsv", "id\tText\tLabel\n1\tgood film\tpos\n2\tbad film\tneg\n")
    assert read_labeled_file(p) == [("good film", "pos"), ("bad film", "neg")]


def test_columns_by_name_and_by_position(tmp_path):
    p = write(tmp_path, "d.tsv", "review\tstars\nfine\t5\nmeh\t2\n")
    assert read_labeled_file(p, text_col="review", label_col="stars") == [("fine", "5"), ("meh", "2")]
    q = write(tmp_path, "e.tsv", "x\tfine\t5\ny\tmeh\t2\n")
    assert read_labeled_file(q, text_col=1, label_col=2) == [("fine", "5"), ("meh", "2")]


def test_named_column_missing_from_header(tmp_path):
    p = write(tmp_path, "d.tsv", "review\tstars\nfine\t5\n")
    with pytest.raises(UserError, match=r"d\.tsv:1: no column named 'body'"):
        read_labeled_file(p, text_col="body", label_col="stars")


def test_csv_with_quoted_commas_and_newlines(tmp_path):
    text = 'text,label\n"Slow, but worth it",pos\n"Two\nlines, one review",neg\nplain,pos\n'
    p = write(tmp_path, "r.csv", text)
    assert read_labeled_file(p) == [
        ("Slow, but worth it", "pos"), ("Two\nlines, one review", "neg"), ("plain", "pos")]


def test_csv_error_names_the_record_start_line(tmp_path):
    p = write(tmp_path, "r.csv", 'text,label\n"a\nb",x\nonly-one-field\n')
    with pytest.raises(UserError, match=r"r\.csv:4: expected 2 comma-separated fields, found 1"):
        read_labeled_file(p)


def test_crlf_and_bom_are_handled(tmp_path):
    p = write(tmp_path, "w.csv", "\ufefftext,label\r\nhello,a\r\nworld,b\r\n")
    assert read_labeled_file(p) == [("hello", "a"), ("world", "b")]


def test_jsonl(tmp_path):
    p = write(tmp_path, "d.jsonl", '{"text": "good", "label": 1}\n\n{"label": "neg", "text": "bad"}\n')
    assert read_labeled_file(p) == [("good", "1"), ("bad", "neg")]
    q = write(tmp_path, "e.jsonl", '{"body": "good", "y": "pos"}\n')
    assert read_labeled_file(q, text_col="body", label_col="y") == [("good", "pos")]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("a.tsv", "pos\tgood\nneg\tbad\textra\n", r"a\.tsv:2: expected 2 tab-separated fields, found 3"),
        ("b.tsv", "pos\tgood\nneg\t  \n", r"b\.tsv:2: empty text"),
        ("c.tsv", "pos\tgood\n\tbad\n", r"c\.tsv:2: empty label"),
        ("d.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", label: 1}\n', r"d\.jsonl:2: bad JSON"),
        ("e.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b"}\n', r"e\.jsonl:3: missing key 'label'"),
        ("f.jsonl", '["a", "x"]\n', r"f\.jsonl:1: expected a JSON object"),
        ("g.jsonl", '{"text": 5, "label": "x"}\n', r"g\.jsonl:1: 'text' must be a string"),
        ("h.csv", 'text,label\n"unclosed,x\n', r"h\.csv:2: bad CSV"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path, name, content, message):
    with pytest.raises(UserError, match=message):
        read_labeled_file(write(tmp_path, name, content))


def test_skip_empty_counts_and_reports(tmp_path, capsys):
    p = write(tmp_path, "s.tsv", "pos\tgood\nneg\t\npos\tfine\nneg\t \n")
    assert read_labeled_file(p, skip_empty=True) == [("good", "pos"), ("fine", "pos")]
    assert "skipped 2 rows with empty text (lines 2, 4)" in capsys.readouterr().err


def test_bad_utf8_names_line_and_byte_offset(tmp_path):
    p = write(tmp_path, "bad.tsv", b"pos\tgood\nneg\tcaf\xe9\n")
    with pytest.raises(UserError, match=r"bad\.tsv:2: not valid UTF-8 at byte offset 16"):
        read_labeled_file(p)


def test_format_errors(tmp_path):
    with pytest.raises(UserError, match="cannot tell the format"):
        read_labeled_file(write(tmp_path, "data.xlsx", "x"))
    with pytest.raises(UserError, match="no such file"):
        read_labeled_file(tmp_path / "missing.tsv")
    with pytest.raises(UserError, match="no labelled rows"):
        read_labeled_file(write(tmp_path, "empty.tsv", "\n\n"))
    # A .txt file is TSV; an explicit fmt overrides the extension.
    assert read_labeled_file(write(tmp_path, "t.txt", "a\tb\n")) == [("b", "a")]
    assert read_labeled_file(write(tmp_path, "t.data", "text,label\nb,a\n"), fmt="csv") == [("b", "a")]


@pytest.mark.parametrize("first", ["review\tsentiment", "text\tcategory", "Sentence,Class", "标签\t文本",
                                   "kind\tblurb"])
def test_a_header_that_is_not_understood_never_becomes_a_class(tmp_path, first):
    sep = "," if "," in first else "\t"
    rows = [f"pos{sep}good film", f"neg{sep}bad film", f"pos{sep}fine", f"neg{sep}dull"]
    p = write(tmp_path, "d.csv" if sep == "," else "d.tsv", "\n".join([first] + rows) + "\n")
    with pytest.raises(UserError) as e:
        read_labeled_file(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{p}:1: the first row looks like a header")
    for name in first.split(sep):
        assert repr(name) in msg  # the columns found
    assert "--text-col/--label-col" in msg
    # named columns read it as a header; positions read that first row as data (the user said so)
    a, b = first.split(sep)
    assert read_labeled_file(p, text_col=b, label_col=a)[0] == ("good film", "pos")
    assert read_labeled_file(p, text_col=1, label_col=0)[0] == (b, a)


def test_headerless_data_is_not_mistaken_for_a_header(tmp_path):
    # a first row of ordinary data: its label repeats below, or its text is a sentence
    p = write(tmp_path, "d.tsv", "pos\tgreat\nneg\tbad\npos\tfine\nneg\tdull\n")
    assert len(read_labeled_file(p)) == 4
    q = write(tmp_path, "e.tsv", "rare\ta one-off example\nneg\tbad\npos\tfine\nneg\tdull\npos\tok\n")
    assert read_labeled_file(q)[0] == ("a one-off example", "rare")


def test_headerless_file_with_one_column(tmp_path):
    with pytest.raises(UserError, match="column 1 asked for, but rows have 1 fields"):
        read_labeled_file(write(tmp_path, "one.tsv", "just text\n"))


# --------------------------------------------------------------------------- parallel and plain text


def test_read_parallel_tsv(tmp_path):
    p = write(tmp_path, "p.tsv", "Bonjour.\tHello.\n\nMerci.\tThanks.\n")
    assert read_parallel(p) == [("Bonjour.", "Hello."), ("Merci.", "Thanks.")]
    with pytest.raises(UserError, match=r"q\.tsv:2: expected 2 tab-separated fields"):
        read_parallel(write(tmp_path, "q.tsv", "a\tb\nc\n"))


def test_read_parallel_two_files(tmp_path):
    src = write(tmp_path, "train.fr", "Bonjour.\nMerci.\n")
    tgt = write(tmp_path, "train.en", "Hello.\nThanks.\n")
    assert read_parallel((src, tgt)) == [("Bonjour.", "Hello."), ("Merci.", "Thanks.")]


def test_read_parallel_line_count_mismatch_names_both_files(tmp_path):
    src = write(tmp_path, "train.fr", "a\nb\nc\n")
    tgt = write(tmp_path, "train.en", "a\nb\n")
    with pytest.raises(UserError, match=r"train\.fr has 3 lines but .*train\.en has 2"):
        read_parallel((src, tgt))


def test_read_parallel_empty_side(tmp_path):
    src = write(tmp_path, "s.txt", "a\n\nc\n")
    tgt = write(tmp_path, "t.txt", "x\ny\nz\n")
    with pytest.raises(UserError, match=r"s\.txt:2: empty line"):
        read_parallel((src, tgt))
    assert read_parallel((src, tgt), skip_empty=True) == [("a", "x"), ("c", "z")]


def test_read_text_file(tmp_path):
    assert read_text_file(write(tmp_path, "t.txt", "To be\nor not")) == "To be\nor not"
    with pytest.raises(UserError, match="empty"):
        read_text_file(write(tmp_path, "e.txt", " \n"))
    with pytest.raises(UserError, match=r"x\.txt:3: not valid UTF-8 at byte offset 4"):
        read_text_file(write(tmp_path, "x.txt", b"a\nb\n\xff"))
