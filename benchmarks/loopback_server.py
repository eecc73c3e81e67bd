"""A small, cheap OpenAI-compatible server on 127.0.0.1 for the benchmarks, run as its own process.

It answers POST .../chat/completions after --delay seconds with a fixed answer (with --echo,
the request's last message, as mock servers do: an answer as long as its prompt), keeps
connections alive, and with --faults F answers a share F of requests with a retryable
error instead (429, 529, 500 or 503, in turn, with `Retry-After: 0` on the 429s): what a
busy hosted API does. It is written on asyncio streams rather than http.server so that
its own CPU stays small next to the client it serves on the same machine. It prints its
port on the first line of stdout, then serves until killed.

    python benchmarks/loopback_server.py [--delay 0.05] [--faults 0.3] [--seed 0] [--echo]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random


def completion(content: str, completion_tokens: int) -> bytes:
    return json.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3000, "completion_tokens": completion_tokens,
                  "total_tokens": 3000 + completion_tokens},
    }).encode()


ANSWER = completion("1234, 5678, 9012", 9)
NOTHING_TO_ECHO = b'{"error": {"message": "no messages to echo", "type": "invalid_request_error"}}'
FAULTS = ((429, b"rate_limit_exceeded", b"Retry-After: 0\r\n"), (529, b"overloaded_error", b""),
          (500, b"server_error", b""), (503, b"server_error", b""))


def reply(status: int, body: bytes, extra: bytes = b"") -> bytes:
    reason = b"OK" if status == 200 else b"Error"
    return (b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (status, reason, len(body), extra)) + body


class Server:
    def __init__(self, delay: float, faults: float, seed: int, echo: bool = False) -> None:
        self.delay, self.faults, self.echo = delay, faults, echo
        self.random = random.Random(seed)
        self.turn = 0

    def answer(self, body: bytes) -> bytes:
        if self.faults and self.random.random() < self.faults:
            status, code, extra = FAULTS[self.turn % len(FAULTS)]
            self.turn += 1
            error = b'{"error": {"message": "fault %d", "type": "%s", "code": "%s"}}' % (status, code, code)
            return reply(status, error, extra)
        if self.echo:
            try:
                content = str(json.loads(body)["messages"][-1]["content"])
            except (ValueError, KeyError, IndexError, TypeError):  # a 400, as a server says it
                return reply(400, NOTHING_TO_ECHO)
            return reply(200, completion(content, len(content) // 4))
        return reply(200, ANSWER)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = await reader.readexactly(length) if length else b""
                if self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(self.answer(body))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def serve(port: int, delay: float, faults: float, seed: int, echo: bool) -> None:
    server = Server(delay, faults, seed, echo)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=1024, limit=1 << 20)
    print(listening.sockets[0].getsockname()[1], flush=True)
    async with listening:
        await listening.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds before each answer")
    parser.add_argument("--faults", type=float, default=0.0, help="share of requests answered with an error")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--echo", action="store_true", help="answer with the request's last message")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.delay, args.faults, args.seed, args.echo))


if __name__ == "__main__":
    main()
