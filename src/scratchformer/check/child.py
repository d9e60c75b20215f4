"""Running the learner's file in a child process: a time limit, a memory limit, one line when it fails.

The learner's code may hang, allocate without bound, call `exit()`, or not import at all. None of that
may take the checker down or print our traceback at them: the file is loaded and checked in a child
(`python -m scratchformer.check.child FILE --out RESULT.json`), which sets RLIMIT_AS to what it already
uses plus `memory_mb` before the learner's first line runs, and writes the Report as JSON. The parent
waits (the clock starts when the child says it is ready, so importing torch is not counted), kills the
child's process group at the limit, and turns every failure into a Report with exit code 2 and one
line, followed by the learner's own traceback lines (frames of their file only, never ours).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .report import Report

STARTUP_S = 120.0  # importing torch on a busy machine; not counted in timeout_s


def _msg(lang: str, zh: str, en: str) -> str:
    return f"{zh} / {en}" if lang == "zh" else f"{en} / {zh}"


def run_child(path, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
              timeout_s: float = 60.0, memory_mb: int = 4096, train_steps: int = 0,
              train_png: str | None = None, sizes: dict | None = None) -> Report:
    path = Path(path)
    report = Report(str(path), lang=lang)
    if not path.is_file() or path.suffix != ".py":
        report.error = _msg(lang, f"{path} 不是一个 .py 文件；请给出你写的 Transformer 的 Python 文件",
                            f"{path} is not a .py file; give the Python file of your Transformer")
        return report
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scratchformer-check-") as tmp:
        out, ready = Path(tmp) / "report.json", Path(tmp) / "ready"
        cmd = [sys.executable, "-m", "scratchformer.check.child", str(path.resolve()), "--out", str(out),
               "--ready", str(ready), "--lang", lang, "--memory-mb", str(memory_mb),
               "--map", json.dumps(mapping or {}), "--sizes", json.dumps(sizes or {})]
        if mask_convention:
            cmd += ["--mask-convention", mask_convention]
        if train_steps:
            cmd += ["--train-steps", str(train_steps)]
        if train_png:
            cmd += ["--train-png", str(Path(train_png).resolve())]
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, cwd=str(path.resolve().parent))
        started = None
        timed_out = False
        while proc.poll() is None:
            now = time.perf_counter()
            if started is None and ready.exists():
                started = now
            if (started is not None and now - started > timeout_s) or (started is None and now - t0 > STARTUP_S):
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.05)
        stderr = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if timed_out:
            report.error = _msg(lang, f"检查没有在 {timeout_s:g} 秒内结束：文件里有死循环，或者在导入时就开始训练？"
                                      f"把训练代码放进 `if __name__ == \"__main__\":`",
                                f"the check did not finish within {timeout_s:g} s: an endless loop, or training "
                                f"at import time? put that under `if __name__ == \"__main__\":`")
        elif out.exists():
            report = Report.from_dict(json.loads(out.read_text(encoding="utf-8")), lang=lang)
        else:
            last = [ln for ln in stderr.strip().splitlines() if ln.strip()][-1:] or [""]
            how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"code {proc.returncode}"
            report.error = _msg(lang, f"加载你的文件时进程退出了（{how}）：文件里调用了 os._exit，或者崩溃了",
                                f"the process exited ({how}) while checking your file: an os._exit, or a crash")
            if last[0]:
                report.error += f"\n  {last[0].strip()}"
    report.path = str(path)
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


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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
    a = ap.parse_args(argv)

    import importlib.util

    from ..fileio import atomic_write_text

    path = os.path.abspath(a.file)
    report = Report(a.file, lang=a.lang)
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        report.error = _msg(a.lang, f"无法读取你的文件：{e}", f"your file could not be read: {e}")
        atomic_write_text(a.out, report.to_json())
        return 0
    uses_torch = "torch" in source
    if uses_torch:  # imported before the memory limit: the limit is for the learner's own allocations
        import torch

        from .run import check_loaded

        torch.set_num_threads(1)  # tiny tensors: more threads only spin (and fight the other processes)

    def done(r: Report) -> int:
        atomic_write_text(a.out, r.to_json())
        return 0

    try:
        import resource

        limit = _vm_bytes() + a.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    Path(a.ready).touch()
    sys.path.insert(0, os.path.dirname(path))
    sys.argv = [path]
    try:
        spec = importlib.util.spec_from_file_location("learner_module", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
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
    try:
        mapping = json.loads(a.map)
        report = check_loaded(module, lang=a.lang, mask_convention=a.mask_convention, mapping=mapping,
                              source=source, path=a.file, train_steps=a.train_steps, train_png=a.train_png,
                              sizes=json.loads(a.sizes))
    except SystemExit as e:
        report.error = _msg(a.lang, f"你的代码在检查时调用了 exit({e.code!r})", f"your code called exit({e.code!r}) while being checked")
        report.error += "".join("\n" + ln for ln in _learner_frames(e, path))
    return done(report)


if __name__ == "__main__":
    sys.exit(main())
