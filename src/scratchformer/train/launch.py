"""torchrun, saying at once what it waits for: `python -m scratchformer.train.launch` takes torchrun's
own arguments and runs torchrun (torch.distributed.run) with them.

    python -m scratchformer.train.launch --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29400 --rdzv-id job1 -m scratchformer.cli train classify ...

With more than one node, the agents meet before any worker starts: that wait is inside torchrun,
not in our code, and torchrun prints nothing during it, so a node that never joins looked like a
hang for the whole join timeout (600 s by default). This prints one line before the wait:

    waiting for 2 nodes to join at HOST:29400 (join timeout 600 s, --rdzv-conf join_timeout=SECONDS); ...
"""
from __future__ import annotations

import sys


def _conf(text: str | None) -> dict[str, str]:
    """torchrun's --rdzv-conf "k=v,k=v" as a dict (what torch reads from it)."""
    pairs = (item.split("=", 1) for item in (text or "").split(",") if "=" in item)
    return {k.strip(): v.strip() for k, v in pairs}


def join_timeout_s(backend: str, conf: dict[str, str]) -> float:
    """How long an agent waits for the other nodes: c10d's join_timeout (600 s unless set), or the
    static rendezvous's timeout (torchrun's launch default, 900 s, unless set)."""
    if backend == "static":
        return float(conf.get("timeout", 900))
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import RendezvousTimeout

    return float(conf.get("join_timeout", RendezvousTimeout().join.total_seconds()))


def waiting_line(args) -> str | None:
    """The line for torchrun's parsed `args` (None when one node: nothing to wait for)."""
    from torch.distributed.run import parse_min_max_nnodes

    low, high = parse_min_max_nnodes(args.nnodes)
    if high <= 1 or args.standalone:
        return None
    nodes = f"{low} nodes" if low == high else f"{low} to {high} nodes"
    static = args.rdzv_backend == "static"
    where = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port or 29500}"  # static: the master's
    me = f"node {args.node_rank + 1} of {high}: " if static else ""
    flag = "--rdzv-conf timeout=SECONDS" if static else "--rdzv-conf join_timeout=SECONDS"
    seconds = join_timeout_s(args.rdzv_backend, _conf(args.rdzv_conf))
    return (f"{me}waiting for {nodes} to join at {where} (join timeout {seconds:g} s, {flag}); a node that has "
            f"not joined by then ends the job with torchrun's RendezvousTimeoutError")


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.errors import record
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    line = waiting_line(args)
    if line:  # before torchrun's rendezvous blocks, on every agent
        print(line, file=sys.stderr, flush=True)
    record(run)(args)  # as torchrun's own main: an error file for the scheduler where one is asked for


if __name__ == "__main__":
    main()
