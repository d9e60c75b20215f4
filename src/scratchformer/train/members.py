"""Ensembles of independently trained runs: one recipe, members with seeds seed, seed+1, ...

The task decides how members are combined at prediction time (classification: mean of the
probabilities; translation: mean of the next-token probabilities at every decoding step);
training them is the same for every task and lives here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from scratchformer.train.checkpoint_store import has_checkpoint

MEMBERS = "members.json"


def train_members(recipe, out_dir: Path, resume: bool, train_one: Callable[..., dict],
                  summarize: Callable[[dict], dict[str, Any]], log=print) -> list[dict[str, Any]]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` with `train.seed + i`;
    `train_one(member_recipe, member_dir, resume=..., log=...)` trains one run and
    `summarize(its result)` gives the fields kept for it in `out_dir/members.json`. With
    `resume`, finished members are kept and an interrupted one continues where it stopped."""
    out_dir.mkdir(parents=True, exist_ok=True)
    recipe.save_json(out_dir / "config.json")  # the whole recipe, so that --resume finds it
    done_file = out_dir / MEMBERS
    done = json.loads(done_file.read_text()) if resume and done_file.exists() else []
    for i in range(len(done), recipe.ensemble):
        member = type(recipe).from_dict(recipe.to_dict())
        member.ensemble, member.train.seed = 1, recipe.train.seed + i
        mdir = out_dir / f"member{i}"
        log(f"ensemble member {i + 1}/{recipe.ensemble} (seed {member.train.seed}) -> {mdir}")
        result = train_one(member, mdir, resume=resume and has_checkpoint(mdir), log=log)
        done.append({"dir": mdir.name, "seed": member.train.seed, **summarize(result)})
        done_file.write_text(json.dumps(done, indent=1) + "\n")
    return done
