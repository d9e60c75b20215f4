"""Running the learner's file in a child process: a time limit, a memory limit, one line when it fails.

The learner's code may hang, allocate without bound, call `exit()`, fork, start a thread that never
ends, flood its output, not import at all, or replace a torch function our reference calls. None of
that may take the checker down, outlive it, bend its verdict or print our traceback at them:

* **In a child, under a supervisor** (`sandbox.run_untrusted`): the file is loaded and checked in
  `python -m scratchformer.check.child FILE --out RESULT.json`, which sets RLIMIT_AS to what it already
  uses plus `memory_mb` and RLIMIT_FSIZE to the output bound before the learner's first line runs, and
  writes the Report as JSON (a file, never a pipe). The clock starts when the child says it is ready,
  so importing torch is not counted. At the limit, on Ctrl-C (the parent stops everything, then the
  command says "interrupted") and on every other way out, the supervisor kills every process the
  child started, the ones detached with `setsid` included (it is their sub-reaper), and the report
  says what happened: an endless loop, too much output, a fork left running, a thread left running,
  memory, an exit, a crash.
* **The reference computes with torch as it was** (`guard.TorchGuard`), the first of the two ways the
  brief allowed: a state their code cannot touch rather than a second process. Replacing a function of
  `torch`, `torch.nn`, `torch.nn.functional` (and the like) or of our own modules is refused where it
  is attempted, so the reference keeps torch's own function; the identity of every torch, Tensor and
  nn-layer callable is compared after their import and after the check. Either way the verdict is
  "your file replaces torch.X" (exit 2), never "all match". A second clean process for the reference
  would feed it every weight and input over a pipe, many times per component: more than a check may
  cost, and the same protection for what a learner's file does in practice.

Every failure is a Report with exit code 2 and one line, followed by the learner's own traceback
lines (frames of their file only, never ours).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .report import Report
from .sandbox import MAX_OUTPUT, leave, limit_self, run_untrusted, threads_left

STARTUP_S = 120.0  # importing torch on a busy machine; not counted in timeout_s


def _msg(lang: str, zh: str, en: str) -> str:
    return f"{zh} / {en}" if lang == "zh" else f"{en} / {zh}"


def not_a_python_file(path: Path, lang: str) -> str | None:
    """Why `path` cannot be checked (missing, a directory, not .py), or None."""
    if path.is_dir():
        return _msg(lang, f"{path} 是一个目录，不是文件；请给出你写的 Transformer 的 .py 文件",
                    f"{path} is a directory, not a file; give the .py file of your Transformer")
    if not path.exists():
        return _msg(lang, f"{path} 不存在；请给出你的 Python 文件的路径",
                    f"{path} does not exist; give the path of your Python file")
    if not path.is_file() or path.suffix not in (".py", ".ipynb"):
        return _msg(lang, f"{path} 不是 .py 文件或 .ipynb 笔记本；请给出你写的 Transformer 的 Python 文件",
                    f"{path} is not a .py file or an .ipynb notebook; give the Python file of your Transformer")
    return None


def stopped_line(outcome, lang: str, timeout_s: float) -> str | None:
    """One line for a run the supervisor had to stop or that left processes behind (None: neither)."""
    left = len(outcome.left)
    zh_also = f"；它启动的 {left} 个进程也已结束" if left else ""
    en_also = f"; the {left} process(es) it started were stopped too" if left else ""
    if outcome.flooded:
        mb = MAX_OUTPUT // 2**20
        return _msg(lang, f"你的代码输出了超过 {mb} MB（循环里的 print？）：检查已停止它；少打印一些，或放进 "
                          f"`if __name__ == \"__main__\":`{zh_also}",
                    f"your code printed more than {mb} MB (a print in a loop?): the check stopped it; print less, "
                    f"or only under `if __name__ == \"__main__\":`{en_also}")
    if outcome.stopped == "timeout":
        return _msg(lang, f"检查没有在 {timeout_s:g} 秒内结束：文件里有死循环，或者在导入时就开始训练？"
                          f"把训练代码放进 `if __name__ == \"__main__\":`{zh_also}",
                    f"the check did not finish within {timeout_s:g} s: an endless loop, or training "
                    f"at import time? put that under `if __name__ == \"__main__\":`{en_also}")
    if outcome.stopped == "startup":
        return _msg(lang, f"检查进程在 {STARTUP_S:g} 秒内没有启动（导入 torch）：机器太忙？再试一次",
                    f"the checking process did not start within {STARTUP_S:g} s (importing torch): "
                    f"is the machine very busy? try again")
    if left:
        first = outcome.left[0][:120]
        return _msg(lang, f"你的代码启动了 {left} 个进程（fork、subprocess 或 setsid），检查结束时它们还在运行，"
                          f"已被结束（{first}）：不要在导入时启动进程",
                    f"your code started {left} process(es) (a fork, a subprocess, a setsid) still running when "
                    f"the check ended; they were stopped ({first}): start no process at import time")
    return None


def run_child(path, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
              timeout_s: float = 60.0, memory_mb: int = 4096, train_steps: int = 0,
              train_png: str | None = None, sizes: dict | None = None) -> Report:
    path = Path(path)
    report = Report(str(path), lang=lang)
    why = not_a_python_file(path, lang)
    if why:
        report.error = why
        return report
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scratchformer-check-") as tmp:
        out, ready = Path(tmp) / "report.json", Path(tmp) / "ready"
        target, cells = path.resolve(), None
        if path.suffix == ".ipynb":  # the code cells as one Python file; places mapped back to "cell 7, line 3"
            from .notebook import NotebookError, to_source
            try:
                text, cells = to_source(path)
            except NotebookError as e:
                report.error = str(e)
                return report
            target = Path(tmp) / "notebook" / (path.stem + ".py")
            target.parent.mkdir()
            target.write_text(text, encoding="utf-8")
        cmd = [sys.executable, "-m", "scratchformer.check.child", str(target), "--out", str(out),
               "--ready", str(ready), "--lang", lang, "--memory-mb", str(memory_mb),
               "--map", json.dumps(mapping or {}), "--sizes", json.dumps(sizes or {})]
        if mask_convention:
            cmd += ["--mask-convention", mask_convention]
        if train_steps:
            cmd += ["--train-steps", str(train_steps)]
        if train_png:
            cmd += ["--train-png", str(Path(train_png).resolve())]
        if cells is not None:
            cmd += ["--origin", str(path.resolve())]
        env = dict(os.environ)
        env.pop("SCRATCHFORMER_CHECKING", None)  # their file must not find the check in its environment (unseen.py)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        outcome = run_untrusted(cmd, timeout_s=timeout_s, ready=ready, startup_s=STARTUP_S, env=env,
                                cwd=str(path.resolve().parent))
        stopped = stopped_line(outcome, lang, timeout_s)
        if out.exists() and not outcome.stopped and not outcome.flooded:
            report = Report.from_dict(json.loads(out.read_text(encoding="utf-8")), lang=lang)
            if stopped and report.error is None:  # a fork still running: the verdict does not stand alone
                report.error = stopped
        elif stopped:
            report.error = stopped
        else:
            lines = [ln for ln in outcome.output.strip().splitlines() if ln.strip()]
            rc = outcome.rc if outcome.rc is not None else 0
            how = f"signal {-rc}" if rc < 0 else f"code {rc}"
            if any("MemoryError" in ln for ln in lines[-3:]):
                report.error = _msg(lang, f"你的代码用完了内存（上限 {memory_mb} MB）",
                                    f"your code ran out of memory (limit {memory_mb} MB)")
            else:
                report.error = _msg(lang, f"加载你的文件时进程退出了（{how}）：文件里调用了 os._exit，或者崩溃了",
                                    f"the process exited ({how}) while checking your file: an os._exit, or a crash")
            if lines:
                report.error += f"\n  {lines[-1].strip()[:300]}"
    report.path = str(path)
    if cells is not None:
        report.place_cells(cells, target)
    report.seconds = time.perf_counter() - t0
    return report


def _learner_frames(exc: BaseException, path: str) -> list[str]:
    """The learner's own traceback lines: frames in their file, then the exception."""
    lines = []
    for fr in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(fr.filename) == path:
            lines.append(f'  File "{Path(path).name}", line {fr.lineno}, in {fr.name}')
            if fr.line:
                lines.append(f"    {fr.line.strip()}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scratchformer.check.child")
    ap.add_argument("file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--lang", default="zh")
    ap.add_argument("--memory-mb", type=int, default=4096)
    ap.add_argument("--mask-convention", default=None)
    ap.add_argument("--map", default="{}")
    ap.add_argument("--sizes", default="{}")
    ap.add_argument("--train-steps", type=int, default=0)
    ap.add_argument("--train-png", default=None)
    ap.add_argument("--origin", default=None, help="the notebook FILE was made from (its folder goes on sys.path)")
    ap.add_argument("--watch-s", type=float, default=5.0, help="seconds their own program may run while watched")
    a = ap.parse_args(argv)

    import importlib.util

    from ..fileio import atomic_write_text
    from .unseen import Unseen, load_all_of_ours, module_name

    os.environ.pop("SCRATCHFORMER_CHECKING", None)  # read by no one here: a check() of theirs asks the flag below
    sys.modules[__package__]._IN_CHECK = True  # a check() their code calls inside this check does nothing
    path = os.path.abspath(a.file)
    pid = os.getpid()
    report = Report(a.file, lang=a.lang)
    unseen = Unseen()

    def done(r: Report) -> int:
        if os.getpid() != pid:  # a copy their os.fork() made: only the original reports (and the supervisor ends it)
            os._exit(0)
        unseen.end()
        left = threads_left()
        if left and r.error is None:  # Python would wait for it at exit, forever: say so and leave without it
            r.error = _msg(a.lang, f"你的代码留下了一个还在运行的线程（{left[0]}）：检查结束后它还没有停止；"
                                   f"把它设为 daemon=True，或在返回前 join 它",
                           f"your code left a thread running ({left[0]}) after the check: make it daemon=True, "
                           f"or join it before returning")
        atomic_write_text(a.out, r.to_json())
        leave()

    try:  # the coding cookie of PEP 263 (latin-1, gbk, ...) and a BOM, as Python itself reads the file
        source = importlib.util.decode_source(Path(path).read_bytes())
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as e:
        report.error = _msg(a.lang, f"无法读取你的文件：{e}", f"your file could not be read: {e}")
        return done(report)
    uses_torch = "torch" in source
    guard = None
    if uses_torch:  # imported before the memory limit: the limit is for the learner's own allocations
        import torch

        from .guard import TorchGuard
        from .run import check_loaded

        torch.set_num_threads(1)  # tiny tensors: more threads only spin (and fight the other processes)
        load_all_of_ours()  # guarded too, and never first imported while their code runs
        guard = TorchGuard()

    def replaced(r: Report) -> Report:
        names = guard.replaced() if guard else []
        if names:
            shown = ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
            r.error = _msg(a.lang, f"你的文件替换了 {shown}：参考实现用的是 torch 自己的函数，"
                                   f"检查不能在被改动的 torch 上进行；给你自己的函数另起一个名字",
                           f"your file replaces {shown}: the reference computes with torch's own functions, "
                           f"so the check cannot run on a changed torch; give your function its own name")
        return r

    watch = None
    if uses_torch:
        from .watch import Watch
        watch = Watch(path, budget_s=a.watch_s)
    limit_self(a.memory_mb)
    Path(a.ready).touch()
    sys.path.insert(0, os.path.dirname(path))
    if a.origin:
        sys.path.insert(0, os.path.dirname(os.path.abspath(a.origin)))
    sys.argv = [path]
    try:
        spec = importlib.util.spec_from_file_location(module_name(path), path)
        module = importlib.util.module_from_spec(spec)
        unseen.start(module)  # from here to done(): sys.modules as their file alone would see it
        if watch is None:
            spec.loader.exec_module(module)
        else:  # their top level runs statement by statement under the watch (watch.py)
            watch.run_module(module, source)
    except SystemExit as e:
        report.error = _msg(a.lang, f"你的文件在加载时调用了 exit({e.code!r})；检查需要导入它而不运行脚本部分",
                            f"your file called exit({e.code!r}) while being loaded; the check imports it, "
                            f"put script code under `if __name__ == \"__main__\":`")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
        return done(report)
    except MemoryError as e:
        report.error = _msg(a.lang, f"你的文件在加载时用完了内存（上限 {a.memory_mb} MB）",
                            f"your file ran out of memory while being loaded (limit {a.memory_mb} MB)")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
        return done(report)
    except BaseException as e:  # whatever the learner's file raised: their lines, not ours
        first = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        report.error = _msg(a.lang, f"无法导入你的文件：{first}", f"your file could not be imported: {first}")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
        return done(report)
    if not uses_torch:
        return done(report)  # no torch, no modules: nothing to check (exit 2, "no component found")
    if replaced(report).error:
        return done(report)
    try:
        watch.run_entries(module, source)  # their __main__ block or main(): the model called as they call it
    except SystemExit as e:
        report.error = _msg(a.lang, f"你的程序在运行时调用了 exit({e.code!r})", f"your program called exit({e.code!r}) while it ran")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
        return done(report)
    except MemoryError:
        report.error = _msg(a.lang, f"你的程序用完了内存（上限 {a.memory_mb} MB）",
                            f"your program ran out of memory (limit {a.memory_mb} MB)")
        return done(report)
    if replaced(report).error:
        return done(report)
    try:
        mapping = json.loads(a.map)
        report = check_loaded(module, lang=a.lang, mask_convention=a.mask_convention, mapping=mapping,
                              source=source, path=a.file, train_steps=a.train_steps, train_png=a.train_png,
                              sizes=json.loads(a.sizes), watch=watch)
    except SystemExit as e:
        report.error = _msg(a.lang, f"你的代码在检查时调用了 exit({e.code!r})", f"your code called exit({e.code!r}) while being checked")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
    except MemoryError:
        report.error = _msg(a.lang, f"你的代码在检查时用完了内存（上限 {a.memory_mb} MB）",
                            f"your code ran out of memory while being checked (limit {a.memory_mb} MB)")
    return done(replaced(report))


if __name__ == "__main__":
    sys.exit(main())
