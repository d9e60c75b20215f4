"""The toy task's recipe, training, inference and export (what a real task spreads over its
package's recipe.py, pipeline.py, inference.py and export.py)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from scratchformer.config import JsonConfig
from scratchformer.errors import UserError
from scratchformer.fileio import atomic_write_text
from scratchformer.tasks.export_folder import staged_export
from scratchformer.tasks.runs import Recipe

BUCKETS = 64  # characters are hashed into this many rows
ROWS = [("apple pie", "word"), ("12 34", "num"), ("green tea", "word"), ("2024", "num"), ("blue sky", "word"),
        ("7 8 9", "num"), ("hello there", "word"), ("1000", "num"), ("quiet night", "word"), ("55 66", "num")]


def write_rows(path: Path) -> Path:
    path.write_text("".join(f"{t}\t{lab}\n" for t, lab in ROWS), encoding="utf-8")
    return path


@dataclass
class ToyData(JsonConfig):
    dataset: str = ""  # a text<TAB>label file


@dataclass
class ToyModel(JsonConfig):
    dim: int = 8
    labels: list = field(default_factory=list)  # filled from the data


@dataclass
class ToyTrain(JsonConfig):
    steps: int = 60
    lr: float = 0.1
    seed: int = 0


@dataclass
class ToyRecipe(Recipe):
    task: str = "toy"
    data: ToyData = field(default_factory=ToyData)
    model: ToyModel = field(default_factory=ToyModel)
    train: ToyTrain = field(default_factory=ToyTrain)


def read_rows(path: str) -> list[tuple[str, str]]:
    if not path or not Path(path).is_file():
        raise UserError(f"toy: --data {path!r} is not a text<TAB>label file")
    return [tuple(line.split("\t", 1)) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def features(texts: list[str]) -> torch.Tensor:
    """(B, BUCKETS) character counts, hashed by code point (the same in every process)."""
    x = torch.zeros(len(texts), BUCKETS)
    for i, t in enumerate(texts):
        for c in t:
            x[i, ord(c) % BUCKETS] += 1.0
    return x


def train_toy(recipe: ToyRecipe, out_dir, resume: bool = False, log=print) -> dict:
    rows = read_rows(recipe.data.dataset)
    labels = sorted({lab for _, lab in rows})
    torch.manual_seed(recipe.train.seed)
    layer = torch.nn.Linear(BUCKETS, len(labels))  # the one layer
    opt = torch.optim.Adam(layer.parameters(), lr=recipe.train.lr)
    x, y = features([t for t, _ in rows]), torch.tensor([labels.index(lab) for _, lab in rows])
    for _ in range(recipe.train.steps):
        loss = torch.nn.functional.cross_entropy(layer(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = Path(out_dir)
    save_file({"head.weight": layer.weight.detach().contiguous(), "head.bias": layer.bias.detach().contiguous()},
              str(out / "model.safetensors"))
    cfg = recipe.to_dict()
    cfg["model"]["labels"] = labels
    atomic_write_text(out / "config.json", json.dumps(cfg, indent=1) + "\n")
    accuracy = Toy.load(out).accuracy(rows)
    atomic_write_text(out / "test_metrics.json", json.dumps({"accuracy": accuracy}) + "\n")  # the sweep reads it
    log(f"toy: loss {loss.item():.4f}, train accuracy {accuracy:.2f}")
    return {"loss": loss.item(), "accuracy": accuracy}


class Toy:
    """The toy task's inference object: what a classifier backend asks of a model."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, labels: list[str]):
        self.weight, self.bias, self.labels = weight, bias, labels

    @classmethod
    def load(cls, run_dir, **options) -> "Toy":
        cfg = json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8"))
        w = load_file(str(Path(run_dir) / "model.safetensors"))
        return cls(w["head.weight"], w["head.bias"], cfg["model"]["labels"])

    def count_tokens(self, texts):
        return [len(t) for t in texts]

    def predict_proba(self, texts, batch_size=None):
        return torch.softmax(features(list(texts)) @ self.weight.T + self.bias, -1).numpy()

    def embed(self, texts, batch_size=None):
        return torch.nn.functional.normalize(features(list(texts)), dim=-1).numpy()

    def accuracy(self, rows) -> float:
        probs = self.predict_proba([t for t, _ in rows])
        return sum(self.labels[int(p.argmax())] == lab for p, (_, lab) in zip(probs, rows)) / len(rows)


def export_json(run_dir, out_dir, check: bool = True) -> dict:
    """The toy's one export format: its weights as JSON (with the export.json every export has)."""
    model = Toy.load(run_dir)
    with staged_export(out_dir, "json", run_dir) as stage:
        atomic_write_text(stage / "weights.json", json.dumps(
            {"weight": model.weight.tolist(), "bias": model.bias.tolist(), "labels": model.labels}) + "\n")
        atomic_write_text(stage / "export.json", json.dumps({"format": "json", "task": "toy",
                                                             "source_run": str(run_dir)}) + "\n")
    return {"max_abs_diff": 0.0} if check else {}


def json_runtime(folder, **options) -> Toy:
    w = json.loads((Path(folder) / "weights.json").read_text(encoding="utf-8"))
    return Toy(torch.tensor(w["weight"]), torch.tensor(w["bias"]), w["labels"])
