"""Running a learner's code in a child so that nothing it starts outlives the check (stdlib only).

    parent (the checker)                 supervisor (this file, run as a script)       child (their code)
    run_untrusted(cmd, ready, ...)  -->  subreaper, own session, polls  ---fork+setsid-->  cmd ...
      polls: ready? timeout? output?      reaps orphans, kills what is left              stdout+stderr -> a file

* **Every process ends with the check.** The supervisor is a sub-reaper (`PR_SET_CHILD_SUBREAPER`):
  whatever the child forks, and whatever those detach with `setsid` or a double fork, is reparented
  to it, not to init, so it stays findable through /proc (the parent-pid tree under the supervisor).
  When the child exits, is timed out, floods its output, or the checker is interrupted (Ctrl-C) or
  dies (`PR_SET_PDEATHSIG`), the supervisor kills that whole tree with SIGKILL and reaps it. What was
  still running after the child itself had ended is reported (`Outcome.left`): "a fork".
* **No pipe to wait on.** The child's stdout and stderr go to a file, not to a pipe, so a grandchild
  holding them can never make the checker wait; the file is bounded twice: the parent stops the run
  when it passes `max_output` bytes, and the child sets `RLIMIT_FSIZE` (`limit_self`), so a write
  past the bound ends it with SIGXFSZ before the disk fills.
* The supervisor talks to the parent in one JSON line on its own stdout, which only it holds.

Linux keeps a process tree in /proc; on another system the supervisor still kills the child's
process group, and the detached grandchild is the one case left to the operating system.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

MAX_OUTPUT = 8 * 2**20  # bytes of stdout + stderr a check may print: debugging prints fit, a flood does not
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


@dataclass
class Outcome:
    """How the child's run ended."""
    rc: int | None                 # its exit status (negative: the signal), None when we stopped it
    stopped: str | None = None     # why we stopped it: "timeout" | "startup" | "output" (a flood)
    left: list[str] = field(default_factory=list)  # processes it started that were still running, stopped
    output: str = ""               # the last 4 kB of what it printed (stdout and stderr together)
    output_bytes: int = 0
    seconds: float = 0.0           # from "ready" to the end

    @property
    def flooded(self) -> bool:
        return self.stopped == "output" or self.rc == -signal.SIGXFSZ


def limit_self(memory_mb: int | None, max_output: int = MAX_OUTPUT) -> None:
    """In the child, before the learner's first line: memory (RLIMIT_AS, on top of what is mapped now,
    torch included) and the size of any file it writes (RLIMIT_FSIZE: its output file among them)."""
    try:
        import resource
    except ImportError:
        return
    limits = [(resource.RLIMIT_FSIZE, max_output + 2**20)]
    if memory_mb is not None:
        limits.append((resource.RLIMIT_AS, _vm_bytes() + memory_mb * 2**20))
    for what, n in limits:
        try:
            resource.setrlimit(what, (n, n))
        except (ValueError, OSError):
            pass


def leave() -> None:
    """The child's way out once its result is written: no interpreter shutdown, which would wait for their threads
    and run their atexit hooks."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def threads_left() -> list[str]:
    """Non-daemon threads still running besides the main one: Python would wait for them at exit."""
    import threading

    return [t.name for t in threading.enumerate()
            if t is not threading.main_thread() and t.is_alive() and not t.daemon]


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_untrusted(cmd: list[str], *, timeout_s: float, ready: Path | None = None, startup_s: float = 120.0,
                  env: dict | None = None, cwd: str | None = None, max_output: int = MAX_OUTPUT) -> Outcome:
    """Run `cmd` under a supervisor; the clock starts when `ready` appears (the child touches it once its
    own imports are done, so importing torch is not counted). Returns when the child and everything it
    started have ended; on KeyboardInterrupt, everything is stopped first, then the interrupt goes on."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scratchformer-sandbox-") as tmp:
        log = Path(tmp) / "output"
        sup = subprocess.Popen([sys.executable, "-I", "-S", __file__, str(os.getpid()), str(log), "--", *cmd],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               env=env, cwd=cwd, start_new_session=True)  # Ctrl-C reaches the checker only
        stopped, started = None, None
        try:
            while sup.poll() is None:
                now = time.perf_counter()
                if started is None and ready is not None and ready.exists():
                    started = now
                if started is None and ready is None:
                    started = t0
                size = log.stat().st_size if log.exists() else 0
                if size > max_output:
                    stopped = "output"
                elif started is not None and now - started > timeout_s:
                    stopped = "timeout"
                elif started is None and now - t0 > startup_s:
                    stopped = "startup"
                if stopped:
                    break
                time.sleep(0.03)
        finally:
            if sup.poll() is None:  # a limit, an interrupt or an error of ours: the supervisor ends it all
                sup.send_signal(signal.SIGTERM)
            try:
                line = sup.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:  # never seen: it only kills and reaps
                sup.kill()
                line = sup.communicate()[0]
        try:
            status = json.loads(line.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError):
            status = {"rc": sup.returncode, "left": []}
        size = log.stat().st_size if log.exists() else 0
        with open(log, "rb") if log.exists() else open(os.devnull, "rb") as f:
            f.seek(max(0, size - 4096))
            tail = f.read().decode("utf-8", "replace")
    rc = None if stopped else status.get("rc")
    return Outcome(rc=rc, stopped=stopped, left=status.get("left", []), output=tail, output_bytes=size,
                   seconds=time.perf_counter() - (started or t0))


# ---------------------------------------------------------------- the supervisor (run as a script)
def _children() -> dict[int, list[tuple[int, bool]]]:
    """Parent pid -> [(child pid, alive)] for every process in /proc (alive: not a zombie)."""
    tree: dict[int, list[tuple[int, bool]]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:  # no /proc: only the process group is reachable
        return tree
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        state, ppid = stat[stat.rindex(b")") + 2:].split()[:2]  # after "pid (comm)"
        tree.setdefault(int(ppid), []).append((int(name), state != b"Z"))
    return tree


def _descendants(root: int) -> list[tuple[int, bool]]:
    tree, out, todo = _children(), [], [root]
    while todo:
        for pid, alive in tree.get(todo.pop(), []):
            out.append((pid, alive))
            todo.append(pid)
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return "?"


def _reap(main: int, status: dict) -> None:
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == main:
            status["rc"] = os.waitstatus_to_exitcode(st)


def _kill_all(main: int, status: dict) -> dict[int, str]:
    """SIGKILL every descendant until none is left (a fork loop runs out of pids to hide behind);
    returns the command lines of those that were still alive."""
    seen: dict[int, str] = {}
    for _ in range(2000):
        try:
            os.killpg(main, signal.SIGKILL)  # the child's own group: all that is left off /proc
        except OSError:
            pass
        _reap(main, status)
        pids = _descendants(os.getpid())
        if not pids:
            break
        for pid, alive in pids:
            if alive:
                seen.setdefault(pid, _cmdline(pid))
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.005)
    return seen


def _supervise(parent: int, log: str, cmd: list[str]) -> int:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)  # the checker killed: we clean up too
    except (OSError, AttributeError):
        pass
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.append(1))
    if os.getppid() != parent:  # it died before PDEATHSIG was set
        return 0
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    main = os.fork()
    if main == 0:
        try:
            os.setsid()
            os.dup2(out, 1)
            os.dup2(out, 2)
            nul = os.open(os.devnull, os.O_RDONLY)
            os.dup2(nul, 0)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    os.close(out)
    status: dict = {"rc": None}
    while not stop and status["rc"] is None:
        _reap(main, status)
        time.sleep(0.02)
    seen = _kill_all(main, status)
    seen.pop(main, None)
    print(json.dumps({"rc": status["rc"], "left": [seen[p] for p in sorted(seen)]}), flush=True)
    return 0


if __name__ == "__main__":
    # python sandbox.py PARENT_PID OUTPUT_FILE -- CMD ...
    sys.exit(_supervise(int(sys.argv[1]), sys.argv[2], sys.argv[sys.argv.index("--") + 1:]))
