"""The registry of faces (tasks/faces.py) is the only way the house finds a task: every face fills
every slot (or says why not, as a one-line error), the CLI's train verbs, params, sweep, export and
serve's backends are made from it, and a run of an unknown task is one line."""
import dataclasses
import json

import pytest

from scratchformer.errors import UserError
from scratchformer.tasks.faces import (DATA_FORMS, Export, Face, Sweep, TaskCLI, Unavailable, YoursVsOurs, export_of, face, faces,
                                       having, task_of, words)
from scratchformer.tasks.runs import Recipe

SLOTS = {f.name for f in dataclasses.fields(Face)}


def test_every_face_fills_every_slot():
    assert set(faces()) == {"classify", "translate", "lm", "mlm", "embed"}
    assert SLOTS == {"name", "words", "recipe", "data_form", "train", "train_recipe", "load", "inspect", "exports",
                     "cli", "params", "sweep", "prepare", "noun", "yours"}
    for name, f in faces().items():
        assert f.name == name and face(name) is f
        assert f.words.startswith(("a ", "an ")) and f.noun, name
        assert f.data_form in DATA_FORMS, name
        assert isinstance(f.recipe, Unavailable) or (isinstance(f.recipe, type) and issubclass(f.recipe, Recipe)), name
        for slot in ("train", "train_recipe", "load", "inspect", "prepare", "params", "cli", "sweep", "yours"):
            value = getattr(f, slot)
            assert value is not None and (callable(value) or isinstance(value, (TaskCLI, Sweep, YoursVsOurs))), \
                (name, slot)
            if isinstance(value, Unavailable):  # a slot not filled says why, in one line, when asked for
                assert len(value.reason) > 20 and "\n" not in value.reason
                with pytest.raises(UserError, match="^" + value.reason[:20]):
                    value("anything")
        assert all(isinstance(e, Export) and callable(e.run) and e.files for e in f.exports.values()), name
        assert all(callable(e.runtime) and isinstance(e.backend, str) for e in f.exports.values()), name
    # a task that trains has a recipe and a train_recipe; one that does not has neither
    for f in faces().values():
        assert bool(f.train) == bool(f.recipe) == bool(f.train_recipe), f.name


def test_serve_has_a_backend_for_every_task_it_can_load_and_none_in_tasks():
    from scratchformer.serve import backends

    # every task with an inference API is served, by its own backend (found by the task's name)
    assert {n for n, f in faces().items() if f.load} == set(backends.BACKENDS)
    assert all(b.task == n and b.routes for n, b in backends.BACKENDS.items())
    assert backends.routes_of("lm") == (backends.COMPLETIONS,) and backends.routes_of("mlm") == ()
    # every engine an export runs under is a --backend serve offers
    from scratchformer.tasks.faces import export_backends

    assert export_backends() == ["onnxruntime", "ctranslate2"]


def test_the_train_verbs_and_evaluate_are_the_faces():
    from scratchformer.cli import build_cli

    cli = build_cli()
    verbs = cli.parser._subparsers._group_actions[0].choices
    train = set(verbs["train"]._subparsers._group_actions[0].choices)
    pretrain = set(verbs["pretrain"]._subparsers._group_actions[0].choices)
    assert train | pretrain == {f.name for f in faces().values() if f.train} == set(having("cli"))
    assert (train, pretrain) == ({"classify", "translate", "lm"}, {"mlm"})
    assert not hasattr(cli, "evaluators")
    flags = verbs["evaluate"]._option_string_actions
    assert {"--max-len", "--context", "--beam", "--no-blend"} <= set(flags)  # each task's own flags


def test_evaluate_on_a_run_whose_task_has_no_evaluate_is_one_line(tmp_path, capsys):
    from scratchformer.cli import main

    (tmp_path / "config.json").write_text(json.dumps({"task": "mlm"}))
    assert main(["evaluate", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: an mlm run is a backbone, not evaluated by `evaluate`")


def test_params_and_sweep_choices_come_from_the_faces():
    from scratchformer.cli import build_cli

    verbs = build_cli().parser._subparsers._group_actions[0].choices
    assert verbs["params"]._option_string_actions["--task"].choices == having("params") == \
        ["classify", "translate", "lm", "mlm"]
    assert verbs["sweep"]._option_string_actions["--task"].choices == having("sweep") == ["classify", "translate", "lm"]
    assert verbs["export"]._option_string_actions["--format"].choices == ["onnx", "transformers", "ctranslate2"]


def test_task_of_reads_the_run_and_names_an_unknown_task(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"task": "lm"}))
    assert task_of(tmp_path) is face("lm")
    (tmp_path / "config.json").write_text(json.dumps({"task": "summarize"}))
    with pytest.raises(UserError) as e:
        task_of(tmp_path)
    assert str(e.value) == (f"{tmp_path} holds a 'summarize' run, which this version does not know "
                            "(it knows classify, translate, lm, mlm, embed runs)")
    with pytest.raises(UserError, match=r"^no task is named 'summarize'; the tasks are classify, translate"):
        face("summarize")
    assert words("translate") == "a translator" and words("nothing") == "nothing"


def test_a_format_a_task_lacks_names_who_has_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"task": "mlm"}))
    with pytest.raises(UserError) as e:
        export_of(tmp_path, "onnx")
    assert str(e.value) == (f"{tmp_path} holds a 'mlm' run; --format onnx exports classify and lm runs "
                            "(translation runs: --format transformers or ctranslate2)")
    (tmp_path / "config.json").write_text(json.dumps({"task": "translate"}))
    assert export_of(tmp_path, "ctranslate2") is face("translate").exports["ctranslate2"]


def test_the_classify_face_starts_from_the_adaptive_base_without_config():
    from scratchformer.tasks.classify.auto import DEFAULT_BUDGET_MIN

    r = face("classify").train_recipe(None, [], {})
    assert (r.time_budget, r.ensemble) == (DEFAULT_BUDGET_MIN, 0)
    r = face("classify").train_recipe(None, ["time_budget=null"], {})
    assert r.time_budget is None
    r = face("classify").train_recipe(None, [], {"time_budget": 3.0})
    assert r.time_budget == 3.0
    r = face("lm").train_recipe(None, ["train.lr=0.01"], {})
    assert r.train.lr == 0.01


def test_inspecting_a_task_without_an_inspect_slot_is_one_line(tmp_path, monkeypatch):
    from scratchformer.diagnostics import inspection
    from scratchformer.tasks import faces as registry

    (tmp_path / "config.json").write_text(json.dumps({"task": "lm"}))
    monkeypatch.setitem(registry.faces(), "lm", dataclasses.replace(face("lm"), inspect=Unavailable("no maps here")))
    with pytest.raises(UserError) as e:
        inspection.load(tmp_path)
    assert str(e.value) == f"{tmp_path} holds a 'lm' run, and that task has no inspect slot: attention and doctor cannot read it"
