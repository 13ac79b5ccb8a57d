"""torchrun: the encoder block at TP = 2 over two processes (one host, and two "hosts" on 127.0.0.1) equals one
process bit for bit; a mismatched shape and a dying rank give a clear error on every rank, no hang.

Each test starts torchrun as a subprocess with a deadline; gloo's timeouts are a few seconds.  A torchrun run
takes 15 to 30 s here (two processes importing torch on two shared cores), so only the one-host run and the
failure script are outside ``slow``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dx1_bringup.cli import main

VENV_BIN = Path(sys.executable).parent
TORCHRUN = VENV_BIN / "torchrun"
DX1 = VENV_BIN / "dx1"
HERE = Path(__file__).parent
#: Seconds a torchrun run may take (two Python processes importing torch on a shared 2-core machine).
DEADLINE = 150


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TORCHRUN), *args], capture_output=True, text=True, timeout=DEADLINE, env=_env())


def _digest(text: str) -> str:
    found = re.findall(r"output ([0-9a-f]{16}) == one chip bit for bit", text)
    assert found, text
    return found[0]


def test_standalone_equals_one_process(capsys):
    assert main(["run", "encoder", "--tp", "2", "--device", "model"]) == 0
    want = _digest(capsys.readouterr().out)
    run = _torchrun("--standalone", "--nproc-per-node=2", str(DX1), "run", "encoder", "--tp", "2", "--device",
                    "model", "--dist-timeout", "20")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _digest(run.stdout) == want
    assert "rank 1 of 2 (torch.distributed, gloo)" in run.stdout
    assert re.search(r"rank 0/2 on .* output " + want, run.stdout) and re.search(r"rank 1/2 on .* output " + want,
                                                                                   run.stdout)


def test_a_board_per_process_equals_one_process(capsys):
    """Two processes of two chips each (model:chips=2): TP = 4, over each board's link and between the processes
    on gloo, bit for bit what four ranks in one process give."""
    block = ["--block", "16,32,4,64"]
    assert main(["run", "encoder", "--tp", "4", *block, "--device", "model"]) == 0
    want = _digest(capsys.readouterr().out)
    run = _torchrun("--standalone", "--nproc-per-node=2", str(DX1), "run", "encoder", "--tp", "4", *block,
                    "--device", "model:chips=2", "--dist-timeout", "20")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _digest(run.stdout) == want
    for r in range(4):
        assert re.search(rf"rank {r}/4 on .* \(pid \d+\): model:chips=2(#1)? \(chip {r % 2} of its board\), "
                         rf"\d+ cycles, output {want}", run.stdout), run.stdout
    wrong = _torchrun("--standalone", "--nproc-per-node=2", str(DX1), "run", "encoder", "--tp", "2", *block,
                      "--device", "model:chips=2", "--dist-timeout", "20")
    assert wrong.returncode != 0
    assert wrong.stderr.count("each process owns the 2 chips of its board: --tp must be the world size 2 times 2, "
                              "4, not 2") == 2, wrong.stderr


@pytest.mark.slow
def test_two_hosts_equal_one_process(capsys):
    assert main(["run", "encoder", "--tp", "2", "--device", "model"]) == 0
    want = _digest(capsys.readouterr().out)
    port = _free_port()
    common = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              f"127.0.0.1:{port}", "--rdzv-id", "dx1-test"]
    cmd = ["run", "encoder", "--tp", "2", "--device", "model", "--dist-timeout", "20"]
    hosts = [subprocess.Popen([str(TORCHRUN), *common, "--node-rank", str(n), str(DX1), *cmd], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    try:
        outs = [h.communicate(timeout=DEADLINE) for h in hosts]
    finally:
        for h in hosts:
            h.kill()
    assert [h.returncode for h in hosts] == [0, 0], outs
    assert _digest(outs[0][0]) == want
    assert "rank 1 of 2 (torch.distributed, gloo)" in outs[1][0]


def test_mismatch_and_dying_rank():
    # torchrun's agent stops the other ranks once one exits in error: it looks every 8 s here, so that rank 0
    # reports its peer's loss (its gloo deadline is 5 s) before that, however loaded the machine.
    run = _torchrun("--standalone", "--nproc-per-node=2", "--monitor-interval", "8", str(HERE / "torchrun_faults.py"))
    # The ranks share torchrun's output: split it at each "rank R:" in case two lines ran together.
    lines = [line.strip() for line in re.findall(r"rank \d+: .*?(?=rank \d+: |\n|$)", run.stdout)]
    mismatch = ("CollectiveMismatch: all_reduce #0: the ranks' fingerprints differ in shape (rank 1 differs): "
                "rank 0 (8,), rank 1 (9,)")
    assert f"rank 0: {mismatch}" in lines and f"rank 1: {mismatch}" in lines, run.stdout + run.stderr
    assert "rank 1: exiting without the next collective" in lines
    assert any(line.startswith("rank 0: RankFailed: all_reduce #1: rank 0 of 2 lost its peers") for line in lines)


@pytest.mark.slow
def test_stalled_rank_fails_every_rank():
    run = _torchrun("--standalone", "--nproc-per-node=2", str(DX1), "run", "encoder", "--tp", "2", "--device",
                    "model", "--device", "model:stall=core0+core1", "--dist-timeout", "10")
    assert run.returncode != 0
    assert "dx1 run (rank 0 of 2): RankFailed: " in run.stderr and "lost its peers" in run.stderr, run.stderr
    assert "dx1 run (rank 1 of 2): " in run.stderr


@pytest.mark.slow
def test_tp_must_be_world_size():
    run = _torchrun("--standalone", "--nproc-per-node=2", str(DX1), "run", "encoder", "--tp", "1", "--device",
                    "model", "--dist-timeout", "10")
    assert run.returncode != 0
    assert ("under torchrun each process is one tensor-parallel rank: --tp must be the world size 2, not 1"
            in run.stderr)
