"""A batch server on 127.0.0.1: OpenAI's Files and Batches and Anthropic's Message Batches,
as their public references describe them, for the real SDKs to talk to (and plain chat
completions and messages, one at a time).

OpenAI: POST /v1/files (multipart, purpose batch, a .jsonl name), POST /v1/batches, GET
/v1/batches[/{id}], POST /v1/batches/{id}/cancel, GET /v1/files/{id}/content (output and
error files, in shuffled order), DELETE /v1/files/{id}. Anthropic: POST /v1/messages/batches,
GET /v1/messages/batches[/{id}], POST .../cancel, GET the absolute results_url (LF-only
JSONL, shuffled). A batch moves on one step per status call (validating, in_progress,
finalizing, completed; Anthropic in_progress, ended) after `ends_after` calls, unless
`hold` is set. Faults on demand: a request's own error (`request_fault`), expiry with
partial results (`expire_keep`), status calls that fail now and then
(`status_fault_every`), a batch refused whole (`refuse_with`), no batch API at all
(`no_batch_api`). Answers are right: the
values the prompt stores under the key asked. Every request is recorded.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.fakeserver import anthropic_answer, openai_answer

CUSTOM_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def right_answer(messages: list[dict[str, Any]]) -> str:
    """What a perfect reader answers a QMKAR prompt: every value stored under the key, in order."""
    text = str(messages[-1]["content"]) if messages else ""
    key = re.search(r"If k is (\d+)", text)
    if key is None:
        return "0"
    return ", ".join(v for k, v in re.findall(r"k: (\d+), v: (\d+)", text) if k == key.group(1))


class FakeBatch:
    """One batch: its requests in input order, how many status calls it has seen, its fate."""

    def __init__(self, kind: str, requests: list[dict[str, Any]], **fields: Any) -> None:
        self.kind = kind  # "openai" or "anthropic"
        self.id = ("batch_" if kind == "openai" else "msgbatch_") + uuid.uuid4().hex[:16]
        self.requests = requests
        self.created = time.time()
        self.polls = 0
        self.status = "validating" if kind == "openai" else "in_progress"
        self.cancel_at: float | None = None
        self.ended_at: float | None = None
        self.fields = fields  # endpoint, input_file_id, metadata...
        self.output: list[dict[str, Any]] = []  # result lines
        self.errors: list[dict[str, Any]] = []
        self.output_file: str | None = None
        self.error_file: str | None = None


class BatchServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.files: dict[str, dict[str, Any]] = {}  # id -> {"meta": FileObject, "data": bytes}
        self.batches: dict[str, FakeBatch] = {}
        self.ends_after = 2  # status calls before a batch ends
        self.hold = False  # True: no batch ends
        self.request_fault: Callable[[dict[str, Any]], str | None] | None = None  # body -> "500"/"400"
        self.expire_keep: int | None = None  # a batch expires, having run only its first N requests
        self.status_fault_every = 0  # every Nth status call fails with a 503
        self.status_outage = 0  # the next N status calls fail with a 503
        self.status_down: int | None = None  # every status call of the Nth batch created fails with a 503
        self.status_calls = 0
        self.no_batch_api = False
        self.refuse_with: str | None = None  # an error code that fails every OpenAI batch at validation
        self.uploads: list[dict[str, Any]] = []  # what each upload said: purpose, filename, content type
        self.shuffle = random.Random(0)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> BatchServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def created(self, kind: str | None = None) -> list[FakeBatch]:
        return [b for b in self.batches.values() if kind is None or b.kind == kind]

    # ---- the lifecycle --------------------------------------------------------------------

    def advance(self, batch: FakeBatch) -> None:
        """One status call's worth of progress."""
        batch.polls += 1
        if batch.cancel_at is not None:
            self.finish(batch, keep=len(batch.requests) // 2, fate="cancelled")
        elif self.hold or batch.ended_at is not None:
            return
        elif batch.polls >= self.ends_after:
            if self.expire_keep is not None:
                self.finish(batch, keep=self.expire_keep, fate="expired")
            else:
                self.finish(batch, keep=len(batch.requests), fate="completed")
        elif batch.kind == "openai":
            batch.status = "in_progress" if batch.polls == 1 else "finalizing"

    def finish(self, batch: FakeBatch, keep: int, fate: str) -> None:
        if batch.ended_at is not None:
            return
        batch.ended_at = time.time()
        for index, request in enumerate(batch.requests):
            ran = index < keep
            if batch.kind == "openai":
                self._openai_line(batch, request, ran, fate)
            else:
                self._anthropic_line(batch, request, ran, fate)
        for lines in (batch.output, batch.errors):
            self.shuffle.shuffle(lines)
        if batch.kind == "openai":
            batch.status = fate
            batch.output_file = self._file(batch.output, "batch_output") if batch.output else None
            batch.error_file = self._file(batch.errors, "batch_output") if batch.errors else None
        else:
            batch.status = "ended"

    def _openai_line(self, batch: FakeBatch, request: dict[str, Any], ran: bool, fate: str) -> None:
        custom_id, body = request["custom_id"], request["body"]
        line: dict[str, Any] = {"id": "batch_req_" + uuid.uuid4().hex[:12], "custom_id": custom_id}
        if not ran:
            if fate == "expired":  # the guide's shape for requests a window ran out on
                batch.errors.append({**line, "response": None, "error": {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion window expired."}})
            return  # cancelled: in neither file
        fault = self.request_fault(body) if self.request_fault else None
        if fault:
            status = int(fault)
            batch.errors.append({**line, "error": None, "response": {
                "status_code": status, "request_id": "req_x",
                "body": {"error": {"message": f"fault {fault}", "type": "server_error" if status >= 500
                                   else "invalid_request_error", "param": None, "code": None}}}})
            return
        answer = openai_answer(right_answer(body["messages"]), body, None)
        batch.output.append({**line, "error": None,
                             "response": {"status_code": 200, "request_id": "req_x", "body": answer}})

    def _anthropic_line(self, batch: FakeBatch, request: dict[str, Any], ran: bool, fate: str) -> None:
        custom_id, params = request["custom_id"], request["params"]
        if not ran:
            batch.output.append({"custom_id": custom_id,
                                 "result": {"type": "canceled" if fate == "cancelled" else "expired"}})
            return
        fault = self.request_fault(params) if self.request_fault else None
        if fault:
            kind = "api_error" if int(fault) >= 500 else "invalid_request_error"
            error = {"type": "error", "error": {"type": kind, "message": f"fault {fault}"},
                     "request_id": "req_x"}
            batch.output.append({"custom_id": custom_id, "result": {"type": "errored", "error": error}})
            return
        message = anthropic_answer(right_answer(params["messages"]), params, None)
        batch.output.append({"custom_id": custom_id, "result": {"type": "succeeded", "message": message}})

    def _file(self, lines: list[dict[str, Any]], purpose: str, name: str = "results.jsonl") -> str:
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        file_id = "file-" + uuid.uuid4().hex[:16]
        self.files[file_id] = {"data": data, "meta": {
            "id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
            "filename": name, "purpose": purpose, "status": "processed", "expires_at": None,
            "status_details": None}}
        return file_id

    # ---- the objects as the APIs show them -------------------------------------------------

    def openai_batch(self, batch: FakeBatch) -> dict[str, Any]:
        completed = len(batch.output)
        failed = sum(1 for line in batch.errors if line.get("response"))
        return {
            "id": batch.id, "object": "batch", "endpoint": batch.fields["endpoint"],
            "input_file_id": batch.fields["input_file_id"], "completion_window": "24h",
            "status": batch.status, "created_at": int(batch.created),
            "expires_at": int(batch.created) + 86400,
            "metadata": batch.fields.get("metadata"), "errors": batch.fields.get("errors"),
            "output_file_id": batch.output_file, "error_file_id": batch.error_file,
            "request_counts": {"total": len(batch.requests), "completed": completed, "failed": failed}
            if batch.ended_at else {"total": len(batch.requests), "completed": 0, "failed": 0},
        }

    def anthropic_batch(self, batch: FakeBatch) -> dict[str, Any]:
        counts = dict.fromkeys(("succeeded", "errored", "canceled", "expired"), 0)
        counts["processing"] = len(batch.requests)
        if batch.ended_at is not None:
            counts["processing"] = 0
            for line in batch.output:
                counts[line["result"]["type"]] += 1
        status = "ended" if batch.ended_at else ("canceling" if batch.cancel_at else "in_progress")
        return {
            "id": batch.id, "type": "message_batch", "processing_status": status, "request_counts": counts,
            "created_at": _rfc3339(batch.created), "expires_at": _rfc3339(batch.created + 86400),
            "ended_at": _rfc3339(batch.ended_at) if batch.ended_at else None,
            "cancel_initiated_at": _rfc3339(batch.cancel_at) if batch.cancel_at else None,
            "archived_at": None,
            "results_url": (f"{self.root_url}/v1/messages/batches/{batch.id}/results"
                            if batch.ended_at else None),
        }


def _rfc3339(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: BatchServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None,
              raw: bytes | None = None, content_type: str = "application/json") -> None:
        data = raw if raw is not None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, anthropic: bool) -> None:
        if anthropic:
            kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
            self._send(status, {"type": "error", "error": {"type": kind, "message": message}})
        else:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error", "param": None,
                                          "code": None}})

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def _route(self, method: str) -> None:
        body = self._body()
        url = urlparse(self.path)
        path, query = url.path.rstrip("/"), parse_qs(url.query)
        server = self.server
        with server.lock:
            server.requests.append((method, path))
            anthropic = path.startswith("/v1/messages")
            if server.no_batch_api:
                self._send(404, {"detail": "Not Found"})
                return
            if not (self.headers.get("Authorization") or self.headers.get("x-api-key")):
                self._error(401, "no key", anthropic)
                return
            parts = path.split("/")[2:]  # after /v1
            if method == "POST" and parts in (["chat", "completions"], ["messages"]):  # one at a time
                request = json.loads(body or b"{}")
                shape = anthropic_answer if anthropic else openai_answer
                self._send(200, shape(right_answer(request["messages"]), request, None))
            elif parts[:2] == ["messages", "batches"]:
                self._anthropic(method, parts[2:], body, query)
            elif parts[:1] == ["batches"]:
                self._batches(method, parts[1:], body, query)
            elif parts[:1] == ["files"]:
                self._files(method, parts[1:], body)
            else:
                self._error(404, f"no route {method} {path}", anthropic)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _status_fault(self, batch_id: str = "") -> bool:
        server = self.server
        server.status_calls += 1
        if server.status_down is not None and list(server.batches).index(batch_id) == server.status_down:
            self._send(503, {"error": {"message": "this batch's status is down"}}, {"Retry-After": "0"})
            return True
        if server.status_outage > 0:
            server.status_outage -= 1
            self._send(503, {"error": {"message": "status is down"}}, {"Retry-After": "0"})
            return True
        if server.status_fault_every and server.status_calls % server.status_fault_every == 0:
            self._send(503, {"error": {"message": "try again"}}, {"Retry-After": "0"})
            return True
        return False

    # ---- OpenAI -------------------------------------------------------------------------------

    def _files(self, method: str, parts: list[str], body: bytes) -> None:
        server = self.server
        if method == "POST" and not parts:
            ctype = self.headers.get("Content-Type", "")
            if not ctype.startswith("multipart/form-data"):
                self._error(400, "files take multipart/form-data", False)
                return
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
            fields: dict[str, Any] = {}
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition")
                fields[str(name)] = (part.get_filename(), part.get_content_type(),
                                     part.get_payload(decode=True))
            purpose = fields.get("purpose", (None, None, b""))[2].decode()
            filename, content_type, data = fields.get("file", (None, None, b""))
            server.uploads.append({"purpose": purpose, "filename": filename, "content_type": content_type})
            if purpose != "batch" or not str(filename).endswith(".jsonl"):
                self._error(400, "Invalid file format for Batch API. Must be .jsonl", False)
                return
            file_id = server._file([], "batch", str(filename))
            server.files[file_id]["data"] = data
            server.files[file_id]["meta"]["bytes"] = len(data)
            self._send(200, server.files[file_id]["meta"])
            return
        file = server.files.get(parts[0]) if parts else None
        if file is None:
            self._error(404, "no such file", False)
        elif method == "GET" and parts[1:] == ["content"]:
            self._send(200, None, raw=file["data"], content_type="application/octet-stream")
        elif method == "GET":
            self._send(200, file["meta"])
        elif method == "DELETE":
            del server.files[parts[0]]
            self._send(200, {"id": parts[0], "object": "file", "deleted": True})
        else:
            self._error(404, "no route", False)

    def _batches(self, method: str, parts: list[str], body: bytes, query: dict[str, list[str]]) -> None:
        server = self.server
        if method == "POST" and not parts:
            request = json.loads(body or b"{}")
            file = server.files.get(request.get("input_file_id", ""))
            if file is None:
                self._error(400, "no such input file", False)
                return
            lines = [json.loads(line) for line in file["data"].decode().splitlines() if line.strip()]
            batch = FakeBatch("openai", lines, endpoint=request["endpoint"],
                              input_file_id=request["input_file_id"], metadata=request.get("metadata"))
            problems = _validate(lines, request["endpoint"])
            if server.refuse_with:
                problems.append({"code": server.refuse_with, "line": None,
                                 "message": f"Enqueued token limit reached for {lines[0]['body']['model']}"})
            if problems:
                batch.status, batch.ended_at = "failed", time.time()
                batch.fields["errors"] = {"object": "list", "data": problems}
            server.batches[batch.id] = batch
            self._send(200, server.openai_batch(batch))
            return
        if method == "GET" and not parts:
            found = sorted(server.created("openai"), key=lambda b: -b.created)
            limit = int(query.get("limit", ["20"])[0])
            after = query.get("after", [None])[0]
            if after is not None:
                ids = [b.id for b in found]
                found = found[ids.index(after) + 1:] if after in ids else []
            page = found[:limit]
            self._send(200, {"object": "list", "data": [server.openai_batch(b) for b in page],
                             **_ends(page), "has_more": len(found) > limit})
            return
        batch = server.batches.get(parts[0]) if parts else None
        if batch is None:
            self._error(404, "no such batch", False)
        elif method == "GET" and len(parts) == 1:
            if self._status_fault(batch.id):
                return
            server.advance(batch)
            self._send(200, server.openai_batch(batch))
        elif method == "POST" and parts[1:] == ["cancel"]:
            if batch.ended_at is None:
                batch.cancel_at, batch.status = time.time(), "cancelling"
            self._send(200, server.openai_batch(batch))
        else:
            self._error(404, "no route", False)

    # ---- Anthropic ----------------------------------------------------------------------------

    def _anthropic(self, method: str, parts: list[str], body: bytes, query: dict[str, list[str]]) -> None:
        server = self.server
        if method == "POST" and not parts:
            requests = json.loads(body or b"{}").get("requests") or []
            ids = [r.get("custom_id", "") for r in requests]
            if not requests or len(requests) > 100_000:
                self._error(400, "requests: between 1 and 100,000", True)
            elif not all(CUSTOM_ID.match(i) for i in ids) or len(set(ids)) != len(ids):
                self._error(400, "requests: custom_id must match ^[a-zA-Z0-9_-]{1,64}$ and be unique", True)
            else:
                batch = FakeBatch("anthropic", requests)
                server.batches[batch.id] = batch
                self._send(200, server.anthropic_batch(batch))
            return
        if method == "GET" and not parts:
            found = sorted(server.created("anthropic"), key=lambda b: -b.created)
            after = query.get("after_id", [None])[0]
            if after is not None:
                ids = [b.id for b in found]
                found = found[ids.index(after) + 1:] if after in ids else []
            limit = int(query.get("limit", ["20"])[0])
            page = found[:limit]
            self._send(200, {"data": [server.anthropic_batch(b) for b in page], **_ends(page),
                             "has_more": len(found) > limit})
            return
        batch = server.batches.get(parts[0]) if parts else None
        if batch is None:
            self._error(404, "no such batch", True)
        elif method == "GET" and len(parts) == 1:
            if self._status_fault(batch.id):
                return
            server.advance(batch)
            self._send(200, server.anthropic_batch(batch))
        elif method == "GET" and parts[1:] == ["results"]:
            if batch.ended_at is None:
                self._error(400, "the batch is still processing", True)
                return
            data = "".join(json.dumps(line) + "\n" for line in batch.output).encode()
            self._send(200, None, raw=data, content_type="application/x-jsonl")
        elif method == "POST" and parts[1:] == ["cancel"]:
            if batch.ended_at is None:
                batch.cancel_at = time.time()
            self._send(200, server.anthropic_batch(batch))
        else:
            self._error(404, "no route", True)


def _validate(lines: list[dict[str, Any]], endpoint: str) -> list[dict[str, Any]]:
    """The API's checks of an input file: url = endpoint, unique custom_ids, one model."""
    problems = []
    seen: set[str] = set()
    models = set()
    for number, line in enumerate(lines, start=1):
        if line.get("url") != endpoint:
            problems.append({"code": "url_mismatch", "line": number, "message": "url differs from endpoint"})
        if line.get("custom_id") in seen:
            problems.append({"code": "duplicate_custom_id", "line": number, "message": "repeated custom_id"})
        seen.add(line.get("custom_id", ""))
        models.add((line.get("body") or {}).get("model"))
    if len(models) > 1:
        problems.append({"code": "model_mismatch", "line": None, "message": "one model per file"})
    return problems


def _ends(page: list[FakeBatch]) -> dict[str, str | None]:
    return {"first_id": page[0].id if page else None, "last_id": page[-1].id if page else None}


def batch_args(server: BatchServer, out: Any, *extra: str, model: str = "openai:gpt-4o",
               n: int = 40) -> list[str]:
    """`qmkar eval --batch` of n QMKAR questions at the server, polling every hundredth of a second."""
    url = server.root_url if model.startswith(("anthropic:", "claude-")) else server.base_url
    return ["eval", "-m", model, "-n", str(n), "--pairs", "10", "-o", str(out), "--base-url", url,
            "--api-key-env", "FAKE_API_KEY", "--batch", "--batch-poll", "0.01", *extra]


if __name__ == "__main__":  # for benchmarks: serve until killed, the port on stdout
    running = BatchServer()
    running.ends_after = 1
    print(running.server_address[1], flush=True)
    running.serve_forever()
