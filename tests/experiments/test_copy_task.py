"""The copy task's planted bugs show their symptoms (a very short version of
`scratchformer experiment copy-task --bugs`), and the bugs stay in the harness."""
import torch

from scratchformer.diagnostics import findings as F
from scratchformer.experiments.copy_task import BUGS, batch, doctor_findings, new_model, planted, train_one


def levels(result: dict, key: str) -> set[str]:
    return {f.level for f in doctor_findings(result) if f.key == key}


def test_no_causal_mask_cheats_in_training_and_fails_at_greedy_decoding():
    healthy, bug = train_one(None, 0, 120), train_one("no-causal-mask", 0, 120)
    gap = lambda r: r["teacher_forced_accuracy"] - r["greedy_accuracy"]  # noqa: E731
    assert gap(bug) > gap(healthy) + 0.2  # measured at 120 steps: 0.38 vs 0.09
    assert bug["greedy_accuracy"] < healthy["greedy_accuracy"] - 0.2  # 0.21 vs 0.57
    assert levels(bug, "future_mass") == {"error"} and levels(healthy, "future_mass") == {"ok"}


def test_an_unshifted_target_gives_near_zero_loss_and_a_failed_greedy_decode():
    bug = train_one("target-shift", 0, 40)
    assert bug["final_train_loss"] < 0.05 and bug["teacher_forced_accuracy"] > 0.99
    assert bug["greedy_accuracy"] < 0.3
    assert levels(bug, "greedy_gap") == {"error"}
    assert F.greedy_gap(0.99, 0.95).level == "ok"


def test_the_bugs_come_off_after_the_run():
    model = new_model(0).eval()
    b = batch([[5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    with torch.no_grad():
        before = model(b["src"], b["tgt_in"])
        for name in BUGS:
            with planted(model, name):
                changed = model(b["src"], b["tgt_in"])
            assert name == "target-shift" or not torch.allclose(changed, before, atol=1e-6), name
        assert torch.equal(model(b["src"], b["tgt_in"]), before)
        assert "encode" not in vars(model) and not any(m._forward_pre_hooks for m in model.modules())
    assert torch.equal(batch([[5, 6]], shift=False)["tgt_in"], batch([[5, 6]])["tgt_out"])
