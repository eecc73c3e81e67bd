"""A fault-injecting OpenAI- and Anthropic-shaped HTTP server on 127.0.0.1, for tests and benchmarks.

It speaks just enough of POST /v1/chat/completions and POST /v1/messages for the real
SDKs. A `script(body, seen)` callable picks a fault for each request (`seen` is how many
requests with the same messages came before); None answers normally. Every request is
recorded. Run as a script it serves plain answers after --delay seconds (benchmarks).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = (
    "429", "429-date", "429-ms", "429-reset", "429-quota", "500", "502", "503", "529",
    "reset", "hang", "malformed", "empty", "reasoning-only", "length", "400", "401", "403", "404", "422",
    "error-200", "trickle", "wrong-shape",
)
RETRYABLE = {"429", "429-date", "429-ms", "429-reset", "500", "502", "503", "529",
             "reset", "hang", "malformed", "empty"}


def prompt_key(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # the default 5 drops connects under load, faking timeouts

    def __init__(self, port: int = 0, delay: float = 0.0, answer: str = "1234",
                 script: Callable[[dict, int], str | None] | None = None, record: bool = True) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.delay = delay
        self.answer = answer
        self.script = script
        self.record = record
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body", "fault"}
        self.seen: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.answered = 0  # answers sent in full
        self.in_flight = self.most_in_flight = 0  # requests being handled, now and at most
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FaultServer:
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # releases hanging handlers
        self.shutdown()
        self.server_close()

    def choose(self, body: dict[str, Any], path: str, headers: dict[str, str]) -> str | None:
        with self.lock:
            key = prompt_key(body)
            seen = self.seen[key]
            self.seen[key] += 1
            fault = self.script(body, seen) if self.script else None
            if fault:
                self.faults[fault] += 1
            if self.record:
                self.requests.append({"path": path, "headers": headers, "body": body, "fault": fault})
        return fault


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers, 40 ms an answer on Linux's loopback.
    disable_nagle_algorithm = True
    server: FaultServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        with self.server.lock:
            self.server.in_flight += 1
            self.server.most_in_flight = max(self.server.most_in_flight, self.server.in_flight)
        try:
            self._post()
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _post(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "bad json"}})
            return
        anthropic = self.path.endswith("/messages")
        bearer = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        key = self.headers.get("x-api-key") or bearer
        fault = self.server.choose(body, self.path, {k.lower(): v for k, v in self.headers.items()})
        if self.server.delay:
            time.sleep(self.server.delay)
        if fault in (None, "reasoning-only", "length"):
            shape = anthropic_answer if anthropic else openai_answer
            self._send(200, shape(self.server.answer, body, fault))
            with self.server.lock:
                self.server.answered += 1
            return
        if fault == "reset":
            # RST instead of a reply: what a crashed proxy looks like.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        if fault == "hang":
            self.server.stopping.wait(30)
            self.close_connection = True
            return
        if fault == "error-200":  # a proxy passing on an upstream error with status 200
            self._send(200, {"error": {"message": "upstream model is overloaded, try later",
                                       "type": "server_error"}})
            return
        if fault == "wrong-shape":  # JSON, but an answer whose text is a number
            payload = openai_answer("", body, None)
            payload["choices"][0]["message"]["content"] = 1234
            self._send(200, payload)
            return
        if fault == "trickle":  # headers at once, then the body a byte at a time, never finished
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            while not self.server.stopping.wait(0.1):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    break
            self.close_connection = True
            return
        if fault == "malformed":
            self._send(200, None, raw=b'{"id": "x", "choices": [ {"message": ')
            return
        if fault == "empty":
            payload = openai_answer("", body, None)
            if anthropic:
                payload = anthropic_answer("", body, None)
                payload["content"] = []
            else:
                payload["choices"] = []
            self._send(200, payload)
            return
        status = int(fault.split("-")[0])
        headers: dict[str, str] = {}
        code = {400: "invalid_request_error", 401: "invalid_api_key", 403: "permission_denied",
                404: "model_not_found", 422: "unprocessable", 429: "rate_limit_exceeded",
                529: "overloaded_error"}.get(status, "server_error")
        # Echo the key the way careless servers do, so a leak would show.
        message = f"fault {fault} for key {key}"
        if fault == "429":
            headers["Retry-After"] = "0"
        elif fault == "429-date":
            headers["Retry-After"] = formatdate(time.time() - 1, usegmt=True)
        elif fault == "429-ms":
            headers["retry-after-ms"] = "5"
        elif fault == "429-reset":
            headers["x-ratelimit-reset-requests"] = "0.01s"
        elif fault == "429-quota":
            code = "insufficient_quota"
        if anthropic:
            payload = {"type": "error", "error": {"type": code, "message": message}}
        else:
            payload = {"error": {"message": message, "type": code, "code": code}}
        self._send(status, payload, headers)


def openai_answer(text: str, body: dict[str, Any], fault: str | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if fault in ("reasoning-only", "length"):
        message = {"role": "assistant", "content": None, "reasoning_content": "thinking about " + text}
    # "length": the output budget ran out while the model was still reasoning.
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "length" if fault == "length" else "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                  "completion_tokens_details": {"reasoning_tokens": 3},
                  "prompt_tokens_details": {"cached_tokens": 40}},
    }


def anthropic_answer(text: str, body: dict[str, Any], fault: str | None) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if body.get("thinking") or fault in ("reasoning-only", "length"):
        content.append({"type": "thinking", "thinking": "I recall 9999 " + text, "signature": "sig"})
    if fault not in ("reasoning-only", "length"):
        content.append({"type": "text", "text": text})
    return {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model", "fake"),
        "content": content, "stop_reason": "max_tokens" if fault == "length" else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 90, "output_tokens": 6, "cache_read_input_tokens": 10},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.05)
    args = parser.parse_args()
    server = FaultServer(args.port, delay=args.delay, record=False)
    print(server.server_address[1], flush=True)
    server.serve_forever()
