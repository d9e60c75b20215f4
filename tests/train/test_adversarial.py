"""`train.adversarial` (FGM on the input embeddings): the gradient the optimizer gets is the clean
one plus the one at embeddings moved by epsilon * g / ||g|| per example, computed here by hand;
with `adversarial_steps` K, the K projected ascent steps and their mean gradient, by hand too;
it does not depend on how the step is split into micro-batches; the adversarial loss is above the
clean one; resume stays exact."""
import json

import pytest
import torch
import torch.nn.functional as F
from train_toy import ToyTask, batch_fn, make_data, weights

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer

X, Y = make_data(40, seed=1)
EPS = 0.7


def marked(seed: int = 5, dropout: float = 0.0) -> ToyTask:
    task = ToyTask(seed=seed, dropout=dropout)
    task.model[0].adversarial_input = True  # the toy's "embedding": its first Linear, (B, 16)
    return task


def cfg(**kw):
    base = dict(lr=0.05, schedule="constant", adversarial=EPS, grad_clip=None, seed=3, progress=False,
                log_every=1)
    base.update(kw)
    return TrainConfig(**base)


def first_step_gradients(tmp_path, sizes, accumulation, steps=1) -> dict:
    task = marked()
    tr = Trainer(task, batch_fn(X, Y, sizes, seed=4, shuffle=False), None,
                 cfg(max_steps=1, accumulation=accumulation, adversarial_steps=steps),
                 tmp_path / f"r{accumulation}-{steps}")
    seen = {}
    tr.optimizer.register_step_pre_hook(
        lambda opt, args, kw: seen.update({n: p.grad.clone() for n, p in task.model.named_parameters()}))
    tr.fit()
    return seen


def by_hand(batches, eps) -> dict:
    """Clean backward, keep dL/de per micro-batch, then the backward at e + r, r per example."""
    model = ToyTask(seed=5).model
    emb, rest = model[0], model[1:]
    total = sum(len(y) for _, y in batches)
    moves = []
    for x, y in batches:
        e = emb(x)  # (B, 16)
        e.retain_grad()
        (F.cross_entropy(rest(e), y, reduction="sum") / total).backward()
        moves.append(eps * e.grad / e.grad.norm(dim=1, keepdim=True))  # (B, 16)
    for (x, y), r in zip(batches, moves):
        (F.cross_entropy(rest(emb(x) + r), y, reduction="sum") / total).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def by_hand_k_steps(batches, eps, k) -> dict:
    """The clean gradient plus the mean over k passes at e + r_j, with r_j = P(r_{j-1} + eps *
    g_{j-1} / ||g_{j-1}||), g_j the gradient at e + r_j, P the projection onto the eps ball."""
    model = ToyTask(seed=5).model
    emb, rest = model[0], model[1:]
    total = sum(len(y) for _, y in batches)

    def unit(v):  # (B, 16), each row to norm 1
        return v / v.norm(dim=1, keepdim=True)

    grads, moves = [], [torch.zeros(len(y), 16) for _, y in batches]
    for x, y in batches:  # the clean pass
        e = emb(x)  # (B, 16)
        e.retain_grad()
        (F.cross_entropy(rest(e), y, reduction="sum") / total).backward()
        grads.append(e.grad)
    for _ in range(k):
        for j, (x, y) in enumerate(batches):
            r = moves[j] + eps * unit(grads[j])
            norm = r.norm(dim=1, keepdim=True)
            moves[j] = torch.where(norm > eps, r * eps / norm, r)
            e = emb(x) + moves[j]
            e.retain_grad()
            (F.cross_entropy(rest(e), y, reduction="sum") / (total * k)).backward()
            grads[j] = e.grad
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def close(a, b, tol=1e-6) -> bool:
    return max((a[k] - b[k]).abs().max().item() for k in a) <= tol


def test_the_step_gradient_is_clean_plus_adversarial_by_hand(tmp_path):
    got = first_step_gradients(tmp_path, [5, 7], accumulation=2)
    expected = by_hand([(X[:5], Y[:5]), (X[5:12], Y[5:12])], EPS)
    assert close(got, expected)
    clean_twice = {k: 2 * v for k, v in by_hand([(X[:12], Y[:12])], 0.0).items()}
    assert not close(got, clean_twice, 1e-3)  # the perturbation changed the gradient


def test_k_ascent_steps_give_the_mean_gradient_of_the_projected_moves_by_hand(tmp_path):
    for k in (2, 3):
        got = first_step_gradients(tmp_path, [5, 7], accumulation=2, steps=k)
        assert close(got, by_hand_k_steps([(X[:5], Y[:5]), (X[5:12], Y[5:12])], EPS, k))
        assert not close(got, by_hand([(X[:5], Y[:5]), (X[5:12], Y[5:12])], EPS), 1e-4)  # not FGM
    assert close(by_hand_k_steps([(X[:12], Y[:12])], EPS, 1), by_hand([(X[:12], Y[:12])], EPS))
    split = first_step_gradients(tmp_path / "split", [5, 7], accumulation=2, steps=3)
    whole = first_step_gradients(tmp_path / "whole", [12], accumulation=1, steps=3)
    assert close(split, whole)


def test_the_perturbation_does_not_depend_on_the_micro_batch_split(tmp_path):
    split = first_step_gradients(tmp_path, [5, 7], accumulation=2)
    whole = first_step_gradients(tmp_path, [12], accumulation=1)
    assert close(split, whole)


def test_the_adversarial_loss_is_logged_and_above_the_clean_loss(tmp_path):
    Trainer(marked(), batch_fn(X, Y, [8, 8, 8, 8, 8], seed=4), None, cfg(max_steps=5), tmp_path / "r").fit()
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 5
    assert all(r["adversarial_loss"] > r["loss"] + 1e-3 for r in train)


def test_resume_is_exact_with_adversarial_training(tmp_path):
    def run(out, steps, resume=False, seed=5):
        task = marked(seed=seed, dropout=0.3)
        Trainer(task, batch_fn(X, Y, [7, 6, 9, 8, 10], seed=4), None, cfg(max_steps=steps), out).fit(resume=resume)
        return task

    ref = run(tmp_path / "ref", 8)
    run(tmp_path / "run", 4)
    resumed = run(tmp_path / "run", 8, resume=True, seed=99)
    assert close(weights(resumed.model), weights(ref.model), 0)


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="adversarial=-1.0 must be >= 0"):
        TrainConfig(adversarial=-1.0)
    with pytest.raises(UserError, match="adversarial_steps=0 must be >= 1"):
        TrainConfig(adversarial=1.0, adversarial_steps=0)
    with pytest.raises(UserError, match="marks none"):
        Trainer(ToyTask(seed=1), batch_fn(X, Y, [8]), None, cfg(max_steps=1), tmp_path / "r")


def test_our_embedding_modules_are_marked():
    from scratchformer.models.bert import BertEmbeddings
    from scratchformer.models.embedding import Embeddings
    assert Embeddings.adversarial_input and BertEmbeddings.adversarial_input
