"""Real processes: `qmkar eval --batch` killed with SIGKILL while it waits, or stopped with
Ctrl-C, then run again: one batch in all, every question recorded exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from qmkar.batch.state import BatchState, state_path
from qmkar.transcript import read
from tests.support.batchserver import BatchServer, batch_args
from tests.support.processes import qmkar_limited_to

MODELS = ["openai:gpt-4o", "anthropic:claude-3-5-sonnet-20241022"]


def command(server: BatchServer, out: Path, model: str) -> list[str]:
    args = batch_args(server, out, model=model, n=30)
    args[args.index("--batch-poll") + 1] = "0.05"
    return [sys.executable, "-c", "from qmkar.cli import main; main()", *args]


def waiting(server: BatchServer, out: Path, process: subprocess.Popen) -> None:
    """Until the process has submitted its batch (and written so) and polled it twice."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        batches = server.created()
        if batches and batches[0].polls >= 2 and BatchState(state_path(out)).live():
            return
        time.sleep(0.02)
    raise AssertionError(f"the batch was not submitted and polled: {process.poll()}")


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
def test_kill_9_while_waiting_then_the_same_command_collects_the_same_batch(batch_server, keyed, tmp_path,
                                                                            model):
    batch_server.hold = True
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "FAKE_API_KEY": keyed}
    victim = subprocess.Popen(command(batch_server, out, model), env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    waiting(batch_server, out, victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    batch_server.hold = False
    done = subprocess.run(command(batch_server, out, model), env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(batch_server.created()) == 1  # collected, not submitted again
    records = read(out).records
    assert len(records) == 30 and all(r.correct for r in records)
    assert set(Counter(r.item_id for r in records).values()) == {1}


@pytest.mark.slow
def test_ctrl_c_stops_waiting_without_cancelling_and_says_how_to_collect(batch_server, keyed, tmp_path):
    batch_server.hold = True
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "FAKE_API_KEY": keyed}
    running = subprocess.Popen(command(batch_server, out, "openai:gpt-4o"), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    waiting(batch_server, out, running)
    running.send_signal(signal.SIGINT)
    stderr = running.communicate(timeout=30)[1]
    assert running.returncode == 130, stderr
    assert "stopped waiting: 1 batch(es) keep running at the provider (nothing was cancelled)" in stderr
    assert "collect with: qmkar eval -m openai:gpt-4o -n 30" in stderr and "--batch" in stderr
    assert not any(path.endswith("/cancel") for _, path in batch_server.requests)
    assert BatchState(state_path(out)).live()
    batch_server.hold = False
    done = subprocess.run(command(batch_server, out, "openai:gpt-4o"), env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(batch_server.created()) == 1 and len(read(out).records) == 30


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="file size limits are POSIX")
def test_a_full_disk_before_submitting_is_one_error_and_the_same_command_then_submits_once(
        batch_server, keyed, tmp_path):
    # The state file must be written before a batch is sent; on a full disk (a real file size
    # limit on the process) that write failed with a traceback and left a torn line.
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "FAKE_API_KEY": keyed}
    _, _, _, *args = command(batch_server, out, MODELS[0])
    full = subprocess.run([*qmkar_limited_to(2_000), *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert full.returncode == 1, full.stderr
    assert f"error: cannot write {state_path(out)}" in full.stderr and "Traceback" not in full.stderr
    assert not batch_server.created() and state_path(out).read_bytes() == b""  # nothing sent, no torn line
    done = subprocess.run(command(batch_server, out, MODELS[0]), env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(batch_server.created()) == 1 and len(read(out).records) == 30
