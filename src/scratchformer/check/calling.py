"""How a learner's file builds and calls its own model, as their program does it: the facts `train --model`
needs to put their network inside our task (docs/your-model.md).

你的文件怎样构造、怎样调用你的模型：`train --model` 用这些事实把你的网络放进我们的任务里。

The same watch as `check` (watch.py): their module-level code, `__main__` block or `main()` runs in a child
process with time and memory limits, stopped at the model's second call (a training loop never runs to the
end). Where the file never calls its model, it is built from the file's own sizes and called with token ids.
What comes back is JSON only (`describe_file`):

- `entry`: the model class (the top one: the called module that holds the most of theirs) or the factory named;
- `ctor`: the arguments their code built it with, as JSON (a config object as its class and fields; a part
  such as a ready-made encoder marks the model as not rebuildable from JSON);
- `call`: the first call's arguments by parameter name (a tensor as its shape, dtype and few values);
- `out`: the shapes it returned; `tables`: the sizes of its embedding tables; `forward`: its parameters.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path

from ..errors import UserError
from .sandbox import run_untrusted

TIMEOUT_S = 40.0


def describe_file(path: str | Path, entry: str | None = None, timeout_s: float = TIMEOUT_S,
                  memory_mb: int = 4096) -> dict:
    """What the child saw (the module docstring); a UserError in one line when their file cannot be run."""
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory(prefix="scratchformer-calling-") as tmp:
        out, ready = Path(tmp) / "calling.json", Path(tmp) / "ready"
        cmd = [sys.executable, "-m", "scratchformer.check.calling", str(path), "--out", str(out),
               "--ready", str(ready), "--memory-mb", str(memory_mb)]
        if entry:
            cmd += ["--entry", entry]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        outcome = run_untrusted(cmd, timeout_s=timeout_s, ready=ready, env=env, cwd=str(path.parent))
        if out.exists() and not outcome.stopped:
            found = json.loads(out.read_text(encoding="utf-8"))
            if found.get("error"):
                raise UserError(f"--model {path.name}: {found['error']}")
            return found
        last = [ln for ln in outcome.output.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        why = {"timeout": f"it ran past {timeout_s:.0f} s", "output": "it printed too much"}.get(
            outcome.stopped, f"it exited ({last[0][:200]})")
        raise UserError(f"--model {path.name}: loading your file to see how it builds its model failed: {why}")


def _plain(v, module_name: str, depth: int = 0):
    """A constructor argument as JSON: numbers, text, lists and dicts as they are; a config object of theirs
    as {"__config__": its class, "fields": ...}; a module (a part) or anything else as a marker."""
    import torch
    from torch import nn

    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and depth < 3:
        return [_plain(x, module_name, depth + 1) for x in v]
    if isinstance(v, dict) and depth < 3 and all(isinstance(k, str) for k in v):
        return {k: _plain(x, module_name, depth + 1) for k, x in v.items()}
    if isinstance(v, torch.device):
        return {"__device__": "cpu"}
    if isinstance(v, torch.dtype):
        return {"__dtype__": str(v).replace("torch.", "")}
    if isinstance(v, nn.Module):
        return {"__part__": type(v).__name__}
    cls = type(v)
    if getattr(cls, "__module__", None) == module_name and hasattr(v, "__dict__") and depth < 2:
        return {"__config__": cls.__name__, "fields": {k: _plain(x, module_name, depth + 1)
                                                      for k, x in vars(v).items() if not k.startswith("_")}}
    if inspect.isclass(v) or inspect.isfunction(v):
        return {"__name__": v.__name__}
    return {"__unknown__": repr(v)[:80]}


def _tensor(v) -> dict:
    import torch

    d = {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")}
    if v.numel() and v.numel() <= 100_000:
        u = torch.unique(v.detach().float()) if v.dtype != torch.bool else torch.unique(v)
        if len(u) <= 6:
            d["values"] = [float(x) for x in u.float()]
    return d


def _arg(v) -> dict | None:
    import torch

    if isinstance(v, torch.Tensor):
        return {"tensor": _tensor(v)}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"value": v}
    return {"other": type(v).__name__}


def _out(v) -> list:
    import torch

    if isinstance(v, torch.Tensor):
        return [list(v.shape)]
    if isinstance(v, (tuple, list)):
        return [list(x.shape) if isinstance(x, torch.Tensor) else None for x in v[:4]]
    if isinstance(v, dict):
        return [list(x.shape) if isinstance(x, torch.Tensor) else None for x in list(v.values())[:4]]
    return [None]


def _forward_params(cls) -> list[dict]:
    try:
        sig = inspect.signature(cls.forward)
    except (TypeError, ValueError):
        return []
    return [{"name": p.name, "required": p.default is p.empty, "kind": p.kind.name}
            for p in sig.parameters.values() if p.name != "self"]


def _describe(watch, module, source: str, entry: str | None) -> dict:
    import torch
    from torch import nn

    from .sizes import learner_sizes
    from .watch import synthesize, top_classes

    if entry and inspect.isfunction(vars(module).get(entry)):
        fn = vars(module)[entry]
        return {"entry": entry, "kind": "function",
                "params": [p.name for p in inspect.signature(fn).parameters.values()]}
    if entry:
        cls = vars(module).get(entry)
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
            names = sorted(n for n, c in vars(module).items() if inspect.isclass(c) and issubclass(c, nn.Module)
                           and c.__module__ == module.__name__)
            return {"error": f"no model class or function {entry!r} in the file; its nn.Module classes: "
                             f"{', '.join(names) or 'none'}"}
    else:
        top = watch.top()
        if top is None:
            synthesize(watch, module, source, {}, learner_sizes(module, source))
            top = watch.top()
        if top is not None:
            cls = type(top.obj)
        else:
            tops = top_classes(module, source)
            if not tops:
                return {"error": "the file defines no nn.Module model class"}
            cls = tops[0]
    seen = watch.called(cls) or watch.of_class(cls)
    constants = {k: v for k, v in vars(module).items() if not k.startswith("_") and (
        isinstance(v, (bool, int, float)) or isinstance(v, str) and len(v) <= 80)}
    out: dict = {"entry": cls.__name__, "kind": "class", "forward": _forward_params(cls),
                 "init": [p.name for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"],
                 "required": [p.name for p in inspect.signature(cls.__init__).parameters.values()
                              if p.name != "self" and p.default is p.empty
                              and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)],
                 "watched": not watch.synthetic and bool(watch.called(cls)), "how": list(watch.entries),
                 "constants": constants}
    if not seen:
        return out
    s = seen[0]
    out["ctor"] = {k: _plain(v, module.__name__) for k, v in s.ctor.items()}
    out["tables"] = [m.num_embeddings for m in s.obj.modules() if isinstance(m, nn.Embedding)]
    out["parameters"] = int(sum(p.numel() for p in s.obj.parameters()))
    if s.calls:
        c = s.calls[0]
        out["call"] = {k: _arg(v) for k, v in c.args.items()}
        with torch.no_grad():  # what it returns, on the arguments of that call
            try:
                was = s.obj.training
                s.obj.eval()
                res = s.obj(**{k: v for k, v in c.args.items()
                               if k in {p["name"] for p in out["forward"] if p["kind"] != "VAR_KEYWORD"}})
                out["out"] = _out(res)
                s.obj.train(was)
            except Exception as e:  # noqa: BLE001 - their code, on their own arguments
                out["out_error"] = f"{type(e).__name__}: {e}"[:200]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scratchformer.check.calling")
    ap.add_argument("file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--entry", default=None)
    ap.add_argument("--memory-mb", type=int, default=4096)
    a = ap.parse_args(argv)

    import importlib.util

    import torch

    from ..fileio import atomic_write_text
    from .sandbox import leave, limit_self
    from .unseen import Unseen, module_name
    from .watch import Watch

    torch.set_num_threads(1)
    path = os.path.abspath(a.file)
    source = importlib.util.decode_source(Path(path).read_bytes())
    watch = Watch(path, budget_s=5.0)
    limit_self(a.memory_mb)
    Path(a.ready).touch()
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path]
    result: dict
    unseen = Unseen()  # their file runs as it would alone: it cannot tell it is watched (unseen.py)
    try:
        spec = importlib.util.spec_from_file_location(module_name(path), path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        unseen.start(module)
        watch.run_module(module, source)
        watch.run_entries(module, source)
        result = _describe(watch, module, source, a.entry)
    except BaseException as e:  # noqa: BLE001 - whatever their file raised, in one line
        result = {"error": f"your file raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    finally:
        unseen.end()
    if watch.raised and "error" not in result:
        result["raised"] = watch.raised
    atomic_write_text(a.out, json.dumps(result))
    leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
