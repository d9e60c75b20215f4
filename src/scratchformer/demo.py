"""`make demo`: fetch THUCNews headlines, train a char-level Transformer classifier for a few
minutes on the CPU, print test accuracy and a few predictions, leave a run directory."""
from __future__ import annotations

import sys
from pathlib import Path

from .tasks.runs import resolve_recipe
from .train.runfolder import run_folder
from .tasks.classify import Classifier, ClassifyRecipe, train_classifier

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "thucnews-demo.json"
EXAMPLES = [
    "火箭客场击败湖人 姚明砍下28分",
    "央行宣布下调存款准备金率0.5个百分点",
    "新款手机发布 搭载最新处理器",
    "北京二手房成交量连续三个月下滑",
    "教育部：明年高考报名人数预计再创新高",
]
# the line `make demo` suggests next: a headline the demo model gets right (sports 0.995), so the
# newcomer's first command agrees with the docs (scripts/quoted_outputs.py quotes its output)
TRY = "国足主场3比0大胜对手"


def main(out: str = "runs/demo") -> int:
    log = lambda m: print(m, flush=True)  # noqa: E731
    recipe = resolve_recipe(ClassifyRecipe, config=str(RECIPE))
    log(f"recipe {RECIPE.name}: THUCNews headlines, char-level encoder + hashed bigrams")
    with run_folder(out, overwrite=True):  # `make demo` again replaces the earlier demo run
        result = train_classifier(recipe, out, log=log)
    clf = Classifier.load(out)
    log("\npredictions:")
    for text, res in zip(EXAMPLES, clf.predict(EXAMPLES)):
        log(f"  {res['label']:<14} {res['score']:.2f}  {text}")
    acc = result["test"]["accuracy"]
    log(f"\nTEST ACCURACY {acc:.2%} (macro-F1 {result['test']['macro_f1']:.2%}) on 1,000 held-out headlines")
    log(f"run directory: {out}/ (curves.png, confusion_test.png, metrics.jsonl, model.safetensors)")
    log(f"try: .venv/bin/scratchformer predict {out} \"{TRY}\"")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
