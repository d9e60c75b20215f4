"""All task-specific glue of `attention` and `doctor`, in one place.

Each adapter loads a run directory through the task's public inference class and answers
two questions in task-free terms: the attention views of one text (`attention`) and a
`Subject` for the doctor (sample batches, their loss, their attention, the embeddings as
trained and as initialised). Methods marked "task API" are what each task package could
offer itself; until then they reach into the model here.
"""
from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import UserError
from ..nn import MultiHeadAttention
from .capture import attention_of
from .maps import AttentionResult, AttentionView
from .subject import AttentionBatch, EmbeddingTable, Subject

PAD, UNK, BOS, EOS, CLS = range(5)  # fixed special ids of our tokenizers (docs/contracts.md)
ENC, DEC, CROSS = "encoder self-attention", "decoder self-attention", "cross-attention"
BATCH = 32


def load(run_dir: str | Path):
    """The adapter for the run in `run_dir` (by its config.json "task")."""
    from ..tasks.runs import RunDir

    run_dir = Path(run_dir)
    task = RunDir(run_dir).task_name()
    adapters = {"classify": ClassifyAdapter, "translate": TranslateAdapter, "lm": LMAdapter, "mlm": MLMAdapter}
    if task not in adapters:
        raise UserError(f"{run_dir} holds a {task!r} run; attention and doctor know {', '.join(adapters)}")
    return adapters[task](run_dir)


# ------------------------------------------------------------------------ shared helpers

def attention_modules(model: torch.nn.Module) -> dict[str, list[MultiHeadAttention]]:
    """Every MultiHeadAttention of a model, by kind, in layer order."""
    out: dict[str, list] = {ENC: [], DEC: [], CROSS: []}
    for name, m in model.named_modules():
        if isinstance(m, MultiHeadAttention):
            kind = CROSS if "cross_attn" in name else DEC if "decoder." in name else ENC
            out[kind].append(m)
    return {k: v for k, v in out.items() if v}


def special_kinds(ids: torch.Tensor, specials: dict[int, str]) -> dict[str, torch.Tensor]:
    """{name: (B, T) positions holding that special token} for the specials present."""
    out = {}
    for i, name in specials.items():
        pos = ids == i
        if bool(pos.any()):
            out[name] = pos
    return out


def initial_copy(model: torch.nn.Module, cfg, seed: int) -> torch.nn.Module:
    """The model as it was before training: the pipelines seed torch right before building it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return type(model)(cfg)


def counts(id_lists, size: int) -> torch.Tensor:
    c = Counter(i for ids in id_lists for i in ids)
    out = torch.zeros(size, dtype=torch.long)
    for i, n in c.items():
        if 0 <= i < size:
            out[i] = n
    return out


def pad(rows: list[list[int]]) -> torch.Tensor:
    T = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (T - len(r)) for r in rows])  # (B, T)


def sample(items: list, n: int) -> list:
    """A seeded random sample, in a fixed order, so reports are reproducible."""
    if not items:
        raise UserError("no samples: the chosen split or file is empty")
    return random.Random(0).sample(items, min(n, len(items)))


def chunks(items: list, size: int = BATCH) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def encoder_views(weights: list[torch.Tensor], real: torch.Tensor, kinds: dict, name: str = ENC,
                  causal: bool = False) -> AttentionBatch:
    return AttentionBatch(name, weights, real, real, kinds, self_attention=True, causal=causal)


# ------------------------------------------------------------------------ classification

class ClassifyAdapter:
    task = "classify"

    def __init__(self, run_dir: Path):
        from ..tasks.classify import Classifier

        self.run_dir, self.notes = run_dir, []
        clf = Classifier.load(run_dir, blend=False)  # the Transformer, not its blend with TF-IDF
        if hasattr(clf, "members"):  # an ensemble run: look at its first member
            self.notes.append("an ensemble run: member 0 is examined")
            clf, self.run_dir = clf.members[0], run_dir / "member0"
        if clf.recipe.model.kind == "lstm":
            from ..models.rnn import NO_ATTENTION

            raise UserError(f"{run_dir}: {NO_ATTENTION}")
        self.clf = clf
        tok = clf.tokenizer
        if hasattr(tok, "cls_id"):  # a BERT tokenizer
            self.pad_id, self.unk_id = tok.pad_id, tok.unk_id
            self.specials = {tok.cls_id: "[CLS]", tok.sep_id: "[SEP]"}
        else:
            self.pad_id, self.unk_id, self.specials = PAD, UNK, {CLS: "<cls>", BOS: "<bos>", EOS: "<eos>"}

    def attention(self, text: str) -> AttentionResult:
        tokens, weights = self.clf.attention(text)
        return AttentionResult(text, [AttentionView(ENC, tokens, tokens, weights)], task=self.task)

    def _pairs(self, data: str | None, split: str) -> tuple[list[tuple[str, str]], str]:
        dc = self.clf.recipe.data
        if data:
            from ..data.readers import read_labeled_file

            return read_labeled_file(data, dc.text_col, dc.label_col), Path(data).name
        return getattr(_classification_data(dc), split), f"the {split} split"

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        clf = self.clf
        pairs, name = self._pairs(data, split)
        unknown = sorted({lab for _, lab in pairs} - set(clf.labels))
        if unknown:
            raise UserError(f"labels {unknown[:5]} were not seen in training; known labels: {clf.labels}")
        batches = []
        for part in chunks(sample(pairs, n)):
            b = clf._batch([t for t, _ in part])  # task API: Classifier.batch(texts, labels)
            b.labels = torch.tensor([clf.labels.index(lab) for _, lab in part])
            batches.append(b)

        def attention(b):
            _, weights = clf.model.features(b.ids, b.bigrams, need_weights=True)
            return [encoder_views(weights, b.ids != self.pad_id, special_kinds(b.ids, self.specials))]

        return Subject(self.run_dir, self.task, clf.model, batches,
                       loss=lambda b: clf.task.loss_sum(b)[0] / len(b.labels), attention=attention,
                       input_ids=lambda b: [b.ids], heads=attention_modules(clf.model),
                       embeddings=self._embeddings(), pad_id=self.pad_id, unk_id=self.unk_id,
                       n_samples=sum(len(b.labels) for b in batches), data_name=name, notes=self.notes)

    def _embeddings(self) -> list[EmbeddingTable]:
        clf, recipe = self.clf, self.clf.recipe
        if recipe.model.init or not hasattr(clf.model, "embed"):
            self.notes.append("embedding rows not compared: the run started from pretrained weights")
            return []
        fresh = initial_copy(clf.model, recipe.model, recipe.train.seed)
        docs = [clf._encode(t) for t, _ in _classification_data(recipe.data).train]  # task API: encode
        segs = [s for d in docs for s in d]
        emb, emb0 = clf.model.embed, fresh.embed
        tables = [EmbeddingTable("token embedding", emb.tokens.weight, emb0.tokens.weight,
                                 counts(([i for i, _ in s] for s in segs), emb.tokens.num_embeddings),
                                 clf.tokenizer.id_to_token, set(range(5)))]
        if emb.bigrams is not None:
            tables.append(EmbeddingTable("bigram embedding", emb.bigrams.weight, emb0.bigrams.weight,
                                         counts(([b for _, b in s] for s in segs), emb.bigrams.num_embeddings),
                                         str, {0}, hashed=True))
        return tables


def _classification_data(dc):
    from ..tasks.classify import load_classification

    return load_classification(dc)


# ------------------------------------------------------------------------ masked LM

class MLMAdapter:
    task = "mlm"

    def __init__(self, run_dir: Path):
        from ..data.tokenizers import Tokenizer
        from ..models.mlm import MaskedLM
        from ..tasks.mlm import MLMRecipe
        from ..train.checkpoint import load_weights

        self.run_dir, self.notes = run_dir, []
        if not (run_dir / "model.safetensors").is_file():
            raise UserError(f"{run_dir} has no model.safetensors yet: the pretraining has not saved a model")
        self.recipe = MLMRecipe.load_json(run_dir / "config.json")
        self.model = MaskedLM(self.recipe.model).eval()
        load_weights(self.model, run_dir / "model.safetensors")
        self.tok = Tokenizer.load(run_dir / "tokenizer.json")
        self.specials = {CLS: "<cls>", BOS: "<bos>", EOS: "<eos>"}

    def _encode(self, text: str) -> tuple[list[int], list[int] | None]:
        from ..data.tokenizers import encode_with_bigrams

        ids, bis = encode_with_bigrams(self.tok, text, self.recipe.model.bigram_buckets)
        n = self.recipe.data.max_len
        return ids[:n], None if bis is None else bis[:n]

    def _token(self, i: int) -> str:
        return "[MASK]" if i == self.recipe.model.mask_id else self.tok.id_to_token(i)

    def _weights(self, ids, bis):
        from ..models.mlm import IGNORE

        with attention_of(self.model.encoder) as got:  # no position chosen: only the encoder runs for real
            self.model(ids, torch.full_like(ids, IGNORE), bis)
        return got.weights

    def attention(self, text: str) -> AttentionResult:
        ids, bis = self._encode(text)
        if not ids:
            raise UserError("the text is empty")
        with torch.no_grad():
            w = self._weights(torch.tensor([ids]), None if bis is None else torch.tensor([bis]))
        tokens = [self._token(i) for i in ids]
        return AttentionResult(text, [AttentionView(ENC, tokens, tokens, [x[0] for x in w])], task=self.task)

    def _docs(self, data: str | None, split: str) -> tuple[list[str], list[str], str]:
        """(sample documents, training documents, name): the pipeline's seeded hold-out."""
        import numpy as np

        from ..tasks.mlm import pretraining_texts

        docs = pretraining_texts(self.recipe.data, log=lambda m: None)
        order = np.random.default_rng(self.recipe.train.seed).permutation(len(docs))
        n_valid = int(round(len(docs) * self.recipe.data.valid_frac))
        valid, train = [docs[i] for i in order[:n_valid]], [docs[i] for i in order[n_valid:]]
        if data:
            lines = [t.strip() for t in Path(data).read_text(encoding="utf-8").split("\n") if t.strip()]
            return lines, train, Path(data).name
        if split == "test":
            raise UserError("an MLM run holds out validation documents only: use --split valid (or train) or --data FILE")
        return (valid if split == "valid" else train), train, f"the {split} documents"

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        from ..models.mlm import mask_tokens

        mc, dc = self.recipe.model, self.recipe.data
        docs, train, name = self._docs(data, split)
        g = torch.Generator().manual_seed(0)
        batches = []
        for part in chunks([e for e in (self._encode(t) for t in sample(docs, n)) if e[0]]):
            ids = pad([i for i, _ in part])
            bis = pad([b for _, b in part]) if part[0][1] is not None else None
            inputs, labels = mask_tokens(ids, mc.mask_id, mc.mask_id, mc.n_specials, dc.mask_prob, dc.span, g)
            batches.append((inputs, labels, bis))

        def loss(b):
            logits, labels = self.model(*b)
            return F.cross_entropy(logits.float(), labels) if len(labels) else logits.sum() * 0

        def attention(b):
            real = b[0] != PAD
            return [encoder_views(self._weights(b[0], b[2]), real, special_kinds(b[0], self.specials))]

        fresh = initial_copy(self.model, mc, self.recipe.train.seed)
        table = EmbeddingTable("token embedding", self.model.embed.tokens.weight, fresh.embed.tokens.weight,
                               counts((self._encode(t)[0] for t in train), mc.vocab_size), self._token,
                               set(range(5)) | {mc.mask_id})
        return Subject(self.run_dir, self.task, self.model, batches, loss, attention, lambda b: [b[0]],
                       attention_modules(self.model), [table], PAD, UNK, sum(len(b[0]) for b in batches), name, self.notes)


# ------------------------------------------------------------------------ language model

class LMAdapter:
    task = "lm"

    def __init__(self, run_dir: Path):
        from ..tasks.lm import LanguageModel

        self.run_dir, self.notes = run_dir, []
        self.lm = LanguageModel.load(run_dir)

    def _weights(self, ids: torch.Tensor):
        with attention_of(self.lm.model.encoder) as got:  # task API: LanguageModel.attention(ids)
            self.lm.model(ids)
        return got.weights

    def attention(self, text: str) -> AttentionResult:
        ids, _ = self.lm.encode_prompt(text)
        ids = ids[-self.lm.recipe.data.context:]
        with torch.no_grad():
            w = self._weights(torch.tensor([ids]))
        tokens = [self.lm.tokenizer.id_to_token(i) for i in ids]
        return AttentionResult(text, [AttentionView("causal self-attention", tokens, tokens, [x[0] for x in w],
                                                    note="rows: queries, columns: keys; a token sees only earlier ones")],
                               task=self.task)

    def _ids(self, text: str) -> list[int]:
        return self.lm.tokenizer.encode(text)

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        from ..tasks.lm import load_lm_text

        recipe, model = self.lm.recipe, self.lm.model
        if split == "test" and not data:
            raise UserError("a language-model run has a train and a valid text, no test split: use --split valid or --data FILE")
        text = load_lm_text(recipe.data)  # task API: the run's text, split as in training
        if data:
            sample_text, name = Path(data).read_text(encoding="utf-8"), Path(data).name
        else:
            sample_text, name = (text.train if split == "train" else text.valid), f"the {split} text"
        ids, ctx = self._ids(sample_text), recipe.data.context
        if len(ids) < ctx + 1:
            raise UserError(f"{name} has {len(ids)} tokens, fewer than one window of {ctx + 1}")
        starts = sample(list(range(0, len(ids) - ctx, max(1, ctx // 2))), n)
        batches = [torch.tensor([ids[s:s + ctx + 1] for s in part]) for part in chunks(sorted(starts))]
        loss = lambda b: F.cross_entropy(model(b[:, :-1]).flatten(0, 1).float(), b[:, 1:].flatten())  # noqa: E731

        def attention(b):
            x = b[:, :-1]
            return [encoder_views(self._weights(x), x != PAD, special_kinds(x, {BOS: "<bos>", EOS: "<eos>"}),
                                  "causal self-attention", causal=True)]

        fresh = initial_copy(model, recipe.model, recipe.train.seed)
        table = EmbeddingTable("token embedding (tied with the output layer)", model.embed.tokens.weight,
                               fresh.embed.tokens.weight, counts([self._ids(text.train)], model.cfg.vocab_size),
                               self.lm.tokenizer.id_to_token, set(range(5)))
        heads = {"causal self-attention": attention_modules(model)[ENC]}
        return Subject(self.run_dir, self.task, model, batches, loss, attention, lambda b: [b],
                       heads, [table], PAD, UNK, sum(len(b) for b in batches), name, self.notes)


# ------------------------------------------------------------------------ translation

class TranslateAdapter:
    task = "translate"

    def __init__(self, run_dir: Path):
        from ..tasks.translate import Translator

        self.run_dir, self.notes = run_dir, []
        self.tr = Translator.load(run_dir)
        self.model = getattr(self.tr.model, "members", [self.tr.model])[0]
        if hasattr(self.tr.model, "members"):
            self.notes.append("an ensemble: member 0 is examined")

    def _forward(self, src: torch.Tensor, tgt_in: torch.Tensor):
        """Logits and the three kinds of attention (task API: Translator.attention)."""
        m = self.model
        with attention_of(m.transformer.encoder) as enc:
            memory, src_mask = m.encode(src)
        enc_w = enc.weights
        logits, dec = m.decode(tgt_in, memory, src_mask, need_weights=True)
        return logits, enc_w, [s for s, _ in dec], [c for _, c in dec]

    def attention(self, text: str) -> AttentionResult:
        tr = self.tr
        src_ids = tr.encode([text], tr.decode_config())[0]
        hyp = tr.hypotheses([text])[0]
        out_ids = hyp.tokens + [EOS]
        with torch.no_grad():
            _, enc, dec, cross = self._forward(torch.tensor([src_ids]), torch.tensor([[BOS] + out_ids[:-1]]))
        show = lambda tok, i: tok.decode([i], skip_special=False).strip() or tok.id_to_token(i)  # noqa: E731
        src = [show(tr.src_tok, i) for i in src_ids]
        tgt_in = [show(tr.tgt_tok, i) for i in [BOS] + out_ids[:-1]]
        out = [show(tr.tgt_tok, i) for i in out_ids]
        views = [AttentionView(ENC, src, src, [w[0] for w in enc], note="source over source"),
                 AttentionView(DEC, tgt_in, tgt_in, [w[0] for w in dec], note="decoder input over earlier decoder input"),
                 AttentionView(CROSS, out, src, [w[0] for w in cross], note="rows: output tokens, columns: source tokens")]
        return AttentionResult(text, views, output=tr.tgt_tok.decode(hyp.tokens), task=self.task)

    def _pairs(self, data: str | None, split: str):
        from ..tasks import translate

        if data:
            return translate.read_parallel_spec(data), Path(data).name
        return getattr(translate.load_translation(self.tr.recipe.data), split), f"the {split} split"

    def _encode_pair(self, s: str, t: str) -> tuple[list[int], list[int], list[int]]:
        y = self.tr.tgt_tok.encode(t)
        return self.tr.src_tok.encode(s) + [EOS], [BOS] + y, y + [EOS]

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        from ..tasks.translate import load_translation

        recipe, tr = self.tr.recipe, self.tr
        pairs, name = self._pairs(data, split)
        batches = []
        for part in chunks([self._encode_pair(s, t) for s, t in sample(pairs, n)]):
            batches.append(tuple(pad([p[i] for p in part]) for i in range(3)))  # src, tgt_in, tgt_out

        def loss(b):
            logits = self.model(b[0], b[1]).float()
            return F.cross_entropy(logits.flatten(0, 1), b[2].flatten(), ignore_index=PAD)

        specials = {BOS: "<bos>", EOS: "<eos>"}

        def attention(b):
            src, tgt_in, _ = b
            _, enc, dec, cross = self._forward(src, tgt_in)
            s_real, t_real = src != PAD, tgt_in != PAD
            return [encoder_views(enc, s_real, special_kinds(src, specials)),
                    encoder_views(dec, t_real, special_kinds(tgt_in, specials), DEC, causal=True),
                    AttentionBatch(CROSS, cross, t_real, s_real, special_kinds(src, specials), self_attention=False)]

        fresh = initial_copy(self.model, recipe.model, recipe.train.seed)
        train = load_translation(recipe.data).train
        m = self.model
        tables = [EmbeddingTable("source embedding", m.src_embed.tokens.weight, fresh.src_embed.tokens.weight,
                                 counts((tr.src_tok.encode(s) for s, _ in train), m.cfg.src_vocab_size),
                                 tr.src_tok.id_to_token, set(range(5)))]
        if not m.cfg.share_embeddings:
            tables.append(EmbeddingTable("target embedding", m.tgt_embed.tokens.weight, fresh.tgt_embed.tokens.weight,
                                         counts((tr.tgt_tok.encode(t) for _, t in train), m.cfg.tgt_vocab_size),
                                         tr.tgt_tok.id_to_token, set(range(5))))
        return Subject(self.run_dir, self.task, m, batches, loss, attention, lambda b: [b[0], b[1]],
                       attention_modules(m), tables, PAD, UNK, sum(len(b[0]) for b in batches), name, self.notes)
