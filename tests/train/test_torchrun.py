"""torchrun itself: two agents on loopback (`--nnodes 2`, c10d rendezvous) run one `train
classify` whose run folder is written once; a job that loses a worker (`--max-restarts 1`)
restarts from its last checkpoint and ends with the uninterrupted run's weights, bit for bit;
`train classify`, `train lm`, `train translate` and `pretrain mlm` print one result and write their
run folder and the prepared data of a fresh cache from rank 0 alone (every write of each process
recorded by write_audit.py); a malformed data file ends every process with its file:line message.
CPU and gloo, one thread per process, a tiny model; every subprocess has a timeout."""
import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from toy_data import headlines, upper_case_pairs, write_pairs, write_tsv
from train_toy import ToyTask

TIMEOUT_S = 120  # a ceiling for a loaded 2-core machine; these runs take 10-40 s
WORKER = Path(__file__).resolve().parent / "elastic_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SCRATCHFORMER_DIST_TIMEOUT_S": "60"}
    env.pop("SCRATCHFORMER_DIST_VERBOSE", None)
    return {**env, **extra}


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def test_two_nodes_on_loopback_write_one_run_folder_once(tmp_path):
    """Two agents (`--nnodes 2`, one process each, c10d rendezvous on 127.0.0.1), the adaptive
    default with a time budget and `train.strategy=fsdp`: one log, one plan, one result line, a
    run folder written by rank 0 alone, and `predict` in one process on what it wrote."""
    data = tmp_path / "news.tsv"
    write_tsv(data, headlines(240, seed=1))
    run = tmp_path / "run"
    port = _free_port()
    cmd = _torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", "--max-restarts", "0",
                    "-m", "scratchformer.cli", "train", "classify", "--data", str(data), "--out", str(run),
                    "--no-baseline", "--time-budget", "3", "--set", "model.encoder.n_layers=1",
                    "--set", "model.encoder.d_model=32", "--set", "model.encoder.d_ff=64",
                    "--set", "model.bigram_buckets=0", "--set", "train.max_steps=6", "--set", "train.strategy=fsdp")
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                               cwd=tmp_path) for _ in range(2)]
    outs = []
    try:
        for a in agents:
            outs.append(a.communicate(timeout=TIMEOUT_S))
    finally:
        for a in agents:
            a.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(err[-3000:] for _, err in outs)
    stdout = "".join(out for out, _ in outs)
    stderr = "".join(err for _, err in outs)
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert len(results) == 1 and results[0]["run_dir"] == str(run)  # one result line, rank 0's
    assert stderr.count("plan: time budget") == 1  # one plan, measured and made on rank 0
    assert stderr.count("e5 not considered: --set model.encoder.n_layers chose the model") == 1
    assert stderr.count("recipe (adaptive default") == 1  # one log
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["split"] == "train"]
    assert train_steps == sorted(set(train_steps)) and train_steps[-1] == 6  # each row written once
    status = json.loads((run / "train_status.json").read_text())
    assert status["finished"] is True and status["step"] == 6
    assert json.loads((run / "config.json").read_text())["ensemble"] == 1  # no members under torchrun
    assert not list(run.glob("member*")) and (run / "test_metrics.json").is_file()
    # the sharded run's weights were gathered into one file: one process predicts with them
    pred = subprocess.run([sys.executable, "-m", "scratchformer.cli", "predict", str(run), "球赛队胜", "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env())
    assert pred.returncode == 0, pred.stderr[-2000:]
    assert json.loads(pred.stdout.splitlines()[0])["label"] in ("体育", "财经")


def _elastic(run: Path, **env) -> subprocess.CompletedProcess:
    # one restart, the claim; the restarted attempt's gloo once read the dead attempt's addresses
    # from torchrun's shared store ("connection refused", or a hang): distributed._attempt_store
    cmd = _torchrun("--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
                    "--monitor-interval", "0.5", str(WORKER), str(run))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(**env))


def _uninterrupted(rank: int, port: int, run: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import elastic_worker

    elastic_worker.main(run)


def test_a_killed_worker_is_restarted_from_the_checkpoint_and_ends_bit_exact(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # the reference: the same two processes, forked here (no launcher to start), never killed
    mp.start_processes(_uninterrupted, args=(_free_port(), str(whole)), nprocs=2, start_method="fork")
    res = _elastic(killed, SCRATCHFORMER_TEST_KILL_AT_STEP="6")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (killed / "killed-at").read_text() == "6"  # rank 1 really died as step 6 began ...
    assert "exitcode: -9" in res.stderr  # ... and torchrun saw it (and restarted: returncode 0)
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # dropout streams included
    init = ToyTask(seed=5, dropout=0.3).model.state_dict()
    assert min((init[k] - a[k]).abs().max().item() for k in a) > 1e-3  # it trained: every tensor moved
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # the log continues where the checkpoint was: no step twice


# ----------------------------------------------------------------------------- one writer, every task
AUDIT = Path(__file__).resolve().parent / "write_audit.py"
LM_TINY = ["--set", "data.context=16", "--set", "data.batch_size=8", "--set", "data.eval_windows=4",
           "--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
           "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=1"]
ENC_TINY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2",
            "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=1"]


def _audited(tmp_path: Path, cli_args, launcher=(), **env) -> tuple[subprocess.CompletedProcess, dict[int, list[str]]]:
    """`scratchformer <cli_args>` under torchrun (2 processes, gloo) on a fresh cache in
    tmp_path/w/cache, each process recording what it writes under tmp_path/w (write_audit.py):
    (the finished torchrun, writes by rank)."""
    logs = tmp_path / "writes"
    logs.mkdir()
    cmd = _torchrun("--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "0", *launcher,
                    str(AUDIT), str(tmp_path / "w"), str(logs), "--", *cli_args,
                    "--set", "train.progress=false", "--set", "train.max_steps=4", "--set", "train.eval_every=2")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path,
                         env=_env(SCRATCHFORMER_CACHE=str(tmp_path / "w" / "cache"), **env))
    writes = {r: (logs / f"rank{r}.txt").read_text().splitlines() for r in (0, 1)}  # each hook was installed
    return res, writes


def _two_processes(tmp_path: Path, *cli_args: str) -> tuple[list[dict], str, dict[int, list[str]]]:
    """`_audited` that succeeds: (result lines on stdout, stderr, writes by rank)."""
    res, writes = _audited(tmp_path, cli_args)
    assert res.returncode == 0, res.stderr[-3000:]
    results = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return results, res.stderr, writes


def _prepared_once(writes: list[str], *kinds: str) -> None:
    """Each kind of prepared folder (rows, vocab, tokens, lm, ...) renamed into the cache once (a
    file renamed inside it, as the record's `.verified` sidecar, is not the folder)."""
    for kind in kinds:
        made = [w for w in writes if w.startswith(f"rename cache/prepared/{kind}-") and w.count("/") == 2]
        assert len(made) == 1, (kind, writes)


def _lines(tmp_path: Path, chars: str, n: int, width: int) -> str:
    """tmp_path/w/text.txt: `n` lines of `width` characters drawn from `chars`; its path."""
    rng = random.Random(0)
    path = tmp_path / "w" / "text.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join("".join(rng.choice(chars) for _ in range(width)) for _ in range(n)) + "\n",
                    encoding="utf-8")
    return str(path)


def _written_once(writes: list[str], *names: str) -> None:
    for name in names:
        assert writes.count(f"rename run/{name}") == 1, (name, writes)


def _metrics_rows_once(run: Path) -> None:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for split in ("train", "valid"):
        steps = [r["step"] for r in rows if r["split"] == split]
        assert steps and steps == sorted(set(steps)) and steps[-1] == 4, rows  # each row written once


def test_train_lm_under_torchrun_evaluates_reports_and_writes_on_rank_0_alone(tmp_path):
    run = tmp_path / "w" / "run"
    results, stderr, writes = _two_processes(tmp_path, "train", "lm", "--data", _lines(tmp_path, "天地人和春夏秋冬", 60, 30),
                                             "--out", str(run), *LM_TINY)
    assert len(results) == 1 and results[0]["run_dir"] == str(run) and results[0]["valid_loss"] > 0
    assert stderr.count("valid (all ") == 1  # the after-fit evaluation's line, once
    assert writes[1] == []  # rank 1 wrote nothing: not the report, not a row, not the prepared text
    _written_once(writes[0], "valid_metrics.json", "config.json")
    _prepared_once(writes[0], "lmvocab", "lm")  # rank 0 prepared the text; rank 1 read it
    _metrics_rows_once(run)


def test_train_translate_under_torchrun_finalizes_and_tests_on_rank_0_alone(tmp_path):
    (tmp_path / "w").mkdir()
    for seed, (name, n) in enumerate((("train", 120), ("valid", 12), ("test", 12))):
        write_pairs(tmp_path / "w" / f"{name}.tsv", upper_case_pairs(n, seed, "ab cd ef gh ij kl".split(), 5))
    run = tmp_path / "w" / "run"
    results, stderr, writes = _two_processes(
        tmp_path, "train", "translate", "--data", str(tmp_path / "w" / "train.tsv"), "--valid",
        str(tmp_path / "w" / "valid.tsv"), "--test", str(tmp_path / "w" / "test.tsv"), "--out", str(run),
        "--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
        "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=1",
        "--set", "data.src_tokenizer=word", "--set", "data.tgt_tokenizer=word", "--set", "data.max_tokens=200",
        "--set", "average_last=2", "--set", "average_every=1", "--set", "decode.beam=1")
    assert len(results) == 1 and results[0]["run_dir"] == str(run) and results[0]["test"]["bleu"] is not None
    assert results[0]["weights"] in ("model.safetensors", "averaged.safetensors")
    assert stderr.count("test: BLEU") == 1 and stderr.count("averaging 2 snapshots") == 1
    assert writes[1] == []  # rank 1 wrote nothing: no snapshot, no average, no final.json, no test report
    _written_once(writes[0], "final.json", "test_metrics.json", "test_hyps.txt", "averaged.safetensors")
    _metrics_rows_once(run)


def test_pretrain_mlm_under_torchrun_writes_its_summary_on_rank_0_alone(tmp_path):
    run = tmp_path / "w" / "run"
    results, _, writes = _two_processes(tmp_path, "pretrain", "mlm", "--data", _lines(tmp_path, "好棒赞差烂糟电影真的", 120, 10),
                                        "--out", str(run), *ENC_TINY, "--set", "data.min_freq=1",
                                        "--set", "data.valid_frac=0.1")
    assert len(results) == 1 and results[0]["run_dir"] == str(run) and results[0]["steps"] == 4
    assert writes[1] == []
    _written_once(writes[0], "pretrain_summary.json", "config.json")
    _metrics_rows_once(run)


def test_train_classify_under_torchrun_prepares_the_data_on_rank_0_alone(tmp_path):
    """A fresh cache: rank 0 indexes the file, counts the vocabulary and writes the token ids
    while rank 1 waits; rank 1 then opens the finished folders and writes nothing anywhere."""
    (tmp_path / "w").mkdir()
    write_tsv(tmp_path / "w" / "news.tsv", headlines(160, seed=1))
    run = tmp_path / "w" / "run"
    results, stderr, writes = _two_processes(tmp_path, "train", "classify", "--data", str(tmp_path / "w" / "news.tsv"),
                                             "--out", str(run), *ENC_TINY, "--set", "time_budget=null",
                                             "--set", "data.tokenizer=char")
    assert len(results) == 1 and results[0]["run_dir"] == str(run) and results[0]["test"]["accuracy"] is not None
    assert "baseline" in results[0]  # fitted and compared by rank 0
    assert writes[1] == []  # rank 1 wrote nothing: no prepared folder, no staging folder, no report
    _prepared_once(writes[0], "rows", "vocab", "tokens")
    assert stderr.count("prepared: ") == 3  # rows, vocabulary, token ids: rank 0's log
    _written_once(writes[0], "config.json", "test_metrics.json")


def test_a_malformed_file_under_torchrun_ends_every_process_with_its_line(tmp_path):
    """Rank 0 finds the bad line while preparing; rank 1, waiting for the prepared data, gets
    the same one-line message from it and exits by itself (it never reads the file). Every
    process prints here (SCRATCHFORMER_DIST_VERBOSE=1); a wait without end would meet the
    subprocess's timeout, the process group's being set far beyond it. torchrun looks every 10 s:
    once rank 0 has exited it SIGTERMs whoever is left, and on a loaded machine rank 1 printed its
    line and was still shutting Python down 3 s later (2026-12-03); a hung rank 1 still meets it."""
    (tmp_path / "w").mkdir()
    bad = tmp_path / "w" / "bad.tsv"
    rows = [f"{t}\t{lab}" for t, lab in headlines(40, seed=2)]
    rows[5] += "\textra"  # line 7 (after the header): three fields
    bad.write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    res, writes = _audited(tmp_path, ["train", "classify", "--data", str(bad), "--out", str(tmp_path / "w" / "run"),
                                      *ENC_TINY], launcher=("--monitor-interval", "10"),
                           SCRATCHFORMER_DIST_VERBOSE="1", SCRATCHFORMER_DIST_TIMEOUT_S="600")
    assert res.returncode != 0
    message = f"error: {bad}:7: expected 2 tab-separated fields, found 3"
    assert res.stderr.count(message) == 2, res.stderr[-3000:]  # rank 0's and rank 1's, one line each
    # each ended by itself with a UserError's exit code (2): not a traceback (1), not torchrun's SIGTERM (-15)
    assert re.findall(r"exitcode\s*:\s*(-?\d+) \(pid", res.stderr) == ["2", "2"], res.stderr[-3000:]
    assert writes[1] == []  # rank 1 built nothing, not even a staging folder
