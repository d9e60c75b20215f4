"""R-Drop (`rdrop`): the training loss is the mean of two dropout passes' cross-entropies plus
rdrop times their symmetric KL; without dropout the two passes agree and it is the plain loss;
in eval mode and at rdrop=0 nothing changes."""
import pytest
import torch
import torch.nn.functional as F

from scratchformer.errors import UserError
from scratchformer.models.classifier import ClassifierConfig, EncoderClassifier
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.classify.data import ClassifyBatch
from scratchformer.tasks.classify.recipe import ClassifyRecipe
from scratchformer.tasks.classify.task import ClassificationTask


def _task(rdrop, dropout):
    torch.manual_seed(0)
    enc = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=dropout)
    model = EncoderClassifier(ClassifierConfig(vocab_size=30, n_classes=3, encoder=enc, head_dropout=dropout))
    recipe = ClassifyRecipe.from_dict({"rdrop": rdrop, "data": {"label_smoothing": 0.1}})
    return ClassificationTask(model, recipe, None, ["a", "b", "c"])


def _batch():
    g = torch.Generator().manual_seed(1)
    return ClassifyBatch(torch.randint(5, 30, (4, 6), generator=g), torch.tensor([0, 1, 2, 1]))


def test_the_loss_is_two_passes_and_their_symmetric_kl():
    task, b = _task(0.7, 0.3), _batch()
    task.model.train()
    torch.manual_seed(5)
    got, _ = task.loss_sum(b)
    torch.manual_seed(5)  # the same dropout masks, by hand
    p, q = task.logits(b), task.logits(b)
    ce = sum(F.cross_entropy(x, b.labels, reduction="sum", label_smoothing=0.1) for x in (p, q)) / 2
    lp, lq = p.log_softmax(-1), q.log_softmax(-1)
    sym_kl = 0.5 * ((lp.exp() * (lp - lq)).sum() + (lq.exp() * (lq - lp)).sum())
    assert sym_kl > 1e-4  # the two passes differ
    torch.testing.assert_close(got, ce + 0.7 * sym_kl, rtol=1e-5, atol=1e-6)
    got.backward()  # a gradient flows through both passes
    assert task.model.head[1].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("rdrop,dropout,train", [(0.7, 0.0, True), (0.7, 0.3, False), (0.0, 0.3, True)])
def test_no_dropout_eval_or_zero_weight_leave_the_plain_loss(rdrop, dropout, train):
    task, b = _task(rdrop, dropout), _batch()
    task.model.train(train)
    torch.manual_seed(5)
    got, _ = task.loss_sum(b)
    torch.manual_seed(5)
    want = F.cross_entropy(task.logits(b), b.labels, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_negative_weight_is_refused():
    with pytest.raises(UserError, match="rdrop must be >= 0"):
        ClassifyRecipe.from_dict({"rdrop": -1})
