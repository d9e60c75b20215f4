"""A torchrun worker that starts `python -m scratchformer.cli ARGS` with its own hash seed
(PYTHONHASHSEED = 11 + LOCAL_RANK): the order of a `set` of strings then differs between the
processes, as it does between the machines of a real job. torchrun runs this file; it replaces
itself with the real worker (exec), so the process torchrun watches is the worker."""
import os
import sys

if __name__ == "__main__":
    env = {**os.environ, "PYTHONHASHSEED": str(11 + int(os.environ.get("LOCAL_RANK", "0")))}
    os.execve(sys.executable, [sys.executable, "-m", "scratchformer.cli", *sys.argv[1:]], env)
