"""The adaptive default of `train classify` (auto.py) and the time budget (budget.py)."""
import json
import math

import pytest

from scratchformer.errors import UserError
from scratchformer.tasks.classify import ClassifyRecipe, train_classifier
from scratchformer.tasks.classify.auto import DataProfile, adaptive_recipe, auto_recipe, choose, describe
from scratchformer.tasks.classify.budget import EVALS_PER_EPOCH, OVERHEAD_S, SLACK, StepTimes, plan_budget
from toy_data import write_reviews_tsv

ZH = ["火箭客场击败湖人队", "央行宣布下调存款准备金率", "新款手机发布搭载处理器", "北京二手房成交量下滑"]
EN = ["the movie was good and the actors were great", "a dull , tedious film with awful dialogue",
      "fine work by a great cast", "poor script ; bad pacing"]


# ----------------------------------------------------------------------------- recipe choice

def test_cjk_text_gets_characters_and_hashed_bigrams():
    r = auto_recipe(ZH * 500)
    assert r.data.tokenizer == "char" and r.model.bigram_buckets > 0
    assert r.model.encoder.n_layers == 2 and r.model.encoder.d_model == 128  # thucnews-demo's size
    assert r.time_budget == 8.0 and r.train.early_stopping_patience


def test_alphabetic_text_gets_lowercased_words_and_hashed_bigrams():
    r = auto_recipe(EN * 500)
    assert (r.data.tokenizer, r.data.lowercase) == ("word", True) and r.model.bigram_buckets > 0
    assert r.model.encoder.n_layers == 1 and r.model.encoder.dropout == 0.5  # rotten-tomatoes-scratch's


def test_model_and_epochs_grow_with_the_data():
    small, large = (choose(DataProfile(n, cjk=True, p99_tokens=30, distinct_bigrams=10**6)) for n in (8_000, 150_000))
    assert (small["model"]["encoder"]["d_model"], small["model"]["encoder"]["n_layers"]) == (128, 2)
    assert (large["model"]["encoder"]["d_model"], large["model"]["encoder"]["n_layers"]) == (256, 4)
    assert small["train"]["epochs"] > large["train"]["epochs"]
    tiny = choose(DataProfile(300, cjk=False, p99_tokens=8, distinct_bigrams=40))
    assert tiny["data"]["batch_size"] == 16 and tiny["model"]["bigram_buckets"] == 0  # too few texts
    assert small["model"]["bigram_buckets"] == 50_000  # capped
    assert choose(DataProfile(3000, True, 30, 700))["model"]["bigram_buckets"] == 2_000


def test_max_len_follows_the_length_of_the_texts():
    assert choose(DataProfile(8000, True, 25, 10))["data"]["max_len"] == 32  # p99 + 2 -> 27 -> 32
    assert choose(DataProfile(8000, False, 45, 10))["data"]["max_len"] == 64  # 45 words * 1.25 + 2
    assert choose(DataProfile(8000, True, 4000, 10))["data"]["max_len"] == 128  # long texts: capped


def test_a_pretrained_backbone_keeps_its_own_tokenizer_and_size():
    c = choose(DataProfile(8000, False, 20, 10), init="minilm")
    assert "tokenizer" not in c["data"] and "d_model" not in c["model"]["encoder"]
    assert c["model"]["bigram_buckets"] == 0 and c["model"]["token_dropout"] == 0.0


def test_set_and_flags_apply_on_top_of_the_adaptive_choice(tmp_path):
    write_reviews_tsv(tmp_path / "train.tsv", 100)
    r = adaptive_recipe(["model.encoder.n_layers=3", "data.lowercase=false"], {"data.dataset": str(tmp_path / "train.tsv")})
    assert r.data.tokenizer == "word" and r.model.encoder.n_layers == 3 and r.data.lowercase is False
    assert "word lower-cased, d128 x 3 layers" in describe(r.replace(data=r.data.replace(lowercase=True)))


# ----------------------------------------------------------------------------- the time budget

def _cost(steps, every, t, valid_batches):
    return steps * t.train_step + (steps // every + 1) * (valid_batches * t.eval_batch + t.save)


def test_plan_fits_the_largest_run_in_the_budget():
    t = StepTimes(train_step=0.5, eval_batch=0.1, save=0.2)
    plan = plan_budget(budget_s=300, spent_s=20, times=t, steps_per_epoch=100, epochs=8, valid_batches=10, test_batches=10)
    usable = SLACK * (300 - 20 - 10 * 0.1 - OVERHEAD_S)  # 246.6 s
    assert plan.eval_every == 100 // EVALS_PER_EPOCH
    assert plan.max_steps == 469  # 469 * 0.5 + 10 evals * 1.2 = 246.5 <= 246.6
    assert _cost(469, 50, t, 10) <= usable < _cost(470, 50, t, 10)
    assert plan.cut and plan.wanted_steps == 800
    assert math.isclose(plan.planned_s, 246.5 + 1.0) and math.isclose(plan.max_minutes, (300 - 20 - 1 - 5) / 60)


def test_plan_keeps_every_epoch_when_they_fit_and_refuses_a_budget_with_no_room():
    t = StepTimes(0.01, 0.01)
    plan = plan_budget(600, 5, t, steps_per_epoch=40, epochs=5, valid_batches=4, test_batches=4)
    assert plan.max_steps == 200 and not plan.cut and "all 200 steps" in plan.line()
    with pytest.raises(UserError, match="raise --time-budget"):
        plan_budget(10, 9, StepTimes(1.0, 0.1), 40, 5, 4, 4)


def test_training_follows_the_plan_with_an_injected_step_time(tmp_path):
    """A fake 1 s/step: the schedule is planned for the steps that fit (lr ends at its floor)."""
    write_reviews_tsv(tmp_path / "train.tsv", 200)
    recipe = ClassifyRecipe.from_dict({
        "data": {"dataset": str(tmp_path / "train.tsv"), "tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}},
        "train": {"epochs": 20, "lr": 3e-3, "warmup_steps": 50, "progress": False}, "time_budget": 0.75})
    seen = []

    def timer(r, train_batches, valid_batches):
        seen.append((len(train_batches), len(valid_batches)))
        return StepTimes(train_step=1.0, eval_batch=0.01)

    res = train_classifier(recipe, tmp_path / "run", log=lambda m: None, step_timer=timer)
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    plan, train = cfg["plan"], cfg["train"]
    assert seen == [(10, 2)]  # 160 train texts in batches of 16, 20 valid
    assert plan["wanted_steps"] == 200 and 25 <= plan["max_steps"] <= 40  # ~ 0.9 * (45 s - spent) at 1 s/step
    assert train["max_steps"] == plan["max_steps"] and train["warmup_steps"] == plan["max_steps"] // 10
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if r["split"] == "train"][-1]
    assert res["train"]["stop_reason"] == "max_steps"
    assert last["step"] == plan["max_steps"] and math.isclose(last["lr"], 0.1 * 3e-3, rel_tol=0.05)


def test_the_tutorial_recipe_is_the_tutorials():
    """recipes/tutorial-thucnews.json is the 001 tutorial's recipe: its model (d256, 8 heads, 4 layers,
    the old dataclass defaults) and its training: Adam (AdamW with weight_decay 0) at a constant lr
    5e-4, 20 epochs, batch 64, max_len 128, characters with min_freq 3 (docs/from-the-tutorials.md)."""
    from pathlib import Path

    from scratchformer.tasks.runs import resolve_recipe

    path = Path(__file__).resolve().parents[2] / "recipes" / "tutorial-thucnews.json"
    r = resolve_recipe(ClassifyRecipe, config=str(path))
    enc = r.model.encoder
    assert (enc.d_model, enc.n_heads, enc.n_layers, enc.d_ff) == (256, 8, 4, 1024)
    assert (r.train.lr, r.train.weight_decay, r.train.schedule, r.train.warmup_steps, r.train.epochs) == \
        (5e-4, 0.0, "constant", 0, 20)
    assert (r.data.batch_size, r.data.max_len, r.data.tokenizer, r.data.min_freq) == (64, 128, "char", 3)


def test_an_ensemble_shares_the_budget_and_learns_the_real_step_time(tmp_path):
    """Member 0 plans with the (fake, slow) measurement; member 1 with the faster real speed
    member 0 showed, for its share of what was left."""
    write_reviews_tsv(tmp_path / "train.tsv", 120)
    recipe = ClassifyRecipe.from_dict({
        "data": {"dataset": str(tmp_path / "train.tsv"), "tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}},
        "train": {"epochs": 4, "progress": False}, "time_budget": 1.0, "ensemble": 2})
    res = train_classifier(recipe, tmp_path / "ens", log=lambda m: None,
                           step_timer=lambda r, tb, vb: StepTimes(train_step=2.0, eval_batch=0.01))
    plans = [json.loads((tmp_path / "ens" / f"member{i}" / "config.json").read_text())["plan"] for i in (0, 1)]
    assert plans[0]["times"]["train_step"] == 2.0 and plans[0]["max_steps"] < plans[0]["wanted_steps"]
    assert plans[1]["times"]["train_step"] < 2.0 and plans[1]["max_steps"] == plans[1]["wanted_steps"] == 24
    assert 0.9 * 57 / 2 <= plans[0]["budget_s"] <= 57 / 2  # half of 95% of a minute
    assert len(res["train"]["members"]) == 2
    # the real measurement on the same path (timings vary: only that a plan was made)
    train_classifier(recipe, tmp_path / "ens2", log=lambda m: None)
    plan = json.loads((tmp_path / "ens2" / "member1" / "config.json").read_text())["plan"]
    assert plan["times"]["train_step"] > 0 and 1 <= plan["max_steps"] <= plan["wanted_steps"]


# ----------------------------------------------------------------------------- ensemble=0

def test_members_fit_counts_whole_runs_with_their_setup_and_caps_at_the_maximum():
    from scratchformer.tasks.classify.budget import ENSEMBLE_EVAL_SHARE, MAX_MEMBERS

    t = StepTimes(0.1, 0.01)
    # one run: 100 steps * 0.1 + 3 evals * 4 batches * 0.01 + test 4 * 0.01 = 10.16 s, + 20 s setup
    plan = plan_budget(120, 0, t, steps_per_epoch=50, epochs=2, valid_batches=4, test_batches=4, member_setup_s=20)
    usable = SLACK * (120 - 0.04 - OVERHEAD_S)
    assert plan.members_fit == int(usable * (1 - ENSEMBLE_EVAL_SHARE) // (plan.planned_s + 20)) == 3
    assert plan_budget(3600, 0, t, 50, 2, 4, 4, member_setup_s=1).members_fit == MAX_MEMBERS
    cut = plan_budget(30, 0, StepTimes(1.0, 0.01), 50, 2, 4, 4)  # not even one whole run fits
    assert cut.cut and cut.members_fit == 1


def test_the_adaptive_default_asks_for_as_many_seeds_as_fit():
    r = auto_recipe(ZH * 50)
    assert r.ensemble == 0 and "as many seeds as fit" in describe(r)
    assert auto_recipe(ZH * 50, time_budget=None).ensemble == 1
    assert auto_recipe(EN * 50, init="minilm").ensemble == 1  # a pretrained backbone: one run
    with pytest.raises(UserError, match="needs a time budget"):
        ClassifyRecipe.from_dict({"ensemble": 0})
    with pytest.raises(UserError, match=">= 0"):
        ClassifyRecipe.from_dict({"ensemble": -1, "time_budget": 1})


@pytest.mark.parametrize("step_s, planned, members", [(0.002, 3, 3), (1.5, 2, 3), (3.0, 1, 3), (6.0, 0, 1)])
def test_ensemble_zero_trains_the_members_that_fit(tmp_path, step_s, planned, members):
    """A fast fake step: members up to the cap (3 here) fit a minute. At a fake 1.5 s/step two
    runs of 12 steps are planned, at 3 s/step one (36 s); they really take seconds, so more fit
    what is left and train, up to the cap. At 6 s/step not even one whole run fits: a single run
    in the plain layout, planned with the same timing (measured once), never grown."""
    import scratchformer.tasks.classify.budget as budget

    write_reviews_tsv(tmp_path / "train.tsv", 120)
    recipe = ClassifyRecipe.from_dict({
        "data": {"dataset": str(tmp_path / "train.tsv"), "tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}},
        "train": {"epochs": 2, "progress": False}, "time_budget": 1.0, "ensemble": 0})
    calls, lines = [], []

    def timer(r, tb, vb):
        calls.append(r.train.seed)
        return StepTimes(train_step=step_s, eval_batch=0.001)

    old = budget.MAX_MEMBERS
    budget.MAX_MEMBERS = 3  # keep the test short
    try:
        res = train_classifier(recipe, tmp_path / "run", log=lines.append, step_timer=timer)
    finally:
        budget.MAX_MEMBERS = old
    assert any((f"ensemble=0: {planned} member" if planned else "not even one whole run fits") in line for line in lines)
    assert sum("another member fits" in line for line in lines) == members - max(planned, 1)
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["ensemble"] == members  # resolved: a --resume knows what to finish
    if planned:
        assert [m["seed"] for m in res["train"]["members"]] == [0, 1, 2]
        assert (tmp_path / "run" / "member2" / "model.safetensors").exists() and "test" in res
        assert len(calls) == 1 + members  # the count, then each member's own plan
        assert len(json.loads((tmp_path / "run" / "members.json").read_text())) == members
    else:
        assert calls == [0] and saved["plan"]["times"]["train_step"] == step_s  # measured once
        assert saved["plan"]["max_steps"] < saved["plan"]["wanted_steps"] == 12
        assert (tmp_path / "run" / "model.safetensors").exists() and not (tmp_path / "run" / "member0").exists()
