"""Model fixtures for the models, transition and reward tests (loaded by the root conftest):
an offline model hub, the embedded model, a LoRA adapter, and a real OpenAI-compatible HTTP
server (stdlib ``http.server``) backed by a ReplayLM."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

# nothing may come from a model hub while testing
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def embedded_path():
    """The converted embedded model (converted into the user's cache on first use)."""
    from sweworld.models import LMUnavailable
    from sweworld.models.embedded import embedded_model_path

    try:
        return embedded_model_path()
    except LMUnavailable as exc:
        if os.environ.get("SWEWORLD_REQUIRE_MODEL") == "1":  # CI installs it: must load
            pytest.fail(f"SWEWORLD_REQUIRE_MODEL=1 but the embedded model is unavailable: {exc}")
        pytest.skip(str(exc))


class ChatServer:
    """A small ``/v1/chat/completions`` server. Behaviour is set through attributes:

    - ``fail_first``: answer the first N requests with ``fail_status`` (503)
    - ``delay``: seconds to sleep before answering
    - ``mode``: "ok", "garbage" (200, not JSON), "context" (400 context length error),
      "clip" (400 while ``max_tokens`` > ``room``), "no_choices", "fewer" (ignores ``n``)
    """

    def __init__(self, lm: Any):
        self.lm = lm
        self.mode = "ok"
        self.fail_first = 0
        self.fail_status = 503
        self.delay = 0.0
        self.room = 100
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.count += 1
                    number = server.count
                    server.bodies.append(body)
                    server.headers.append(dict(self.headers))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    status, payload = server.answer(self.path, body, number)
                    if server.delay:
                        time.sleep(server.delay)
                    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with server.lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, path: str, body: dict, number: int) -> tuple[int, Any]:
        from sweworld.models import GenerationRequest

        if path != "/v1/chat/completions":
            return 404, {"error": {"message": f"no route {path}", "code": 404}}
        if number <= self.fail_first:
            return self.fail_status, {"error": {"message": "overloaded", "code": 503}}
        if self.mode == "garbage":
            return 200, b"<html>upstream proxy error</html>"
        if self.mode == "no_choices":
            return 200, {"id": "x", "object": "chat.completion"}
        if self.mode == "context" or (self.mode == "clip" and body["max_tokens"] > self.room):
            if self.mode == "context":
                message = (
                    "This model's maximum context length is 600 tokens. However, you requested "
                    "1000 tokens (900 in the messages, 100 in the completion). Please reduce "
                    "the length of the messages or completion."
                )
            else:
                message = (
                    f"'max_tokens' or 'max_completion_tokens' is too large: "
                    f"{body['max_tokens']}. This model's maximum context length is "
                    f"{500 + self.room} tokens and your request has 500 input tokens "
                    f"({body['max_tokens']} > {500 + self.room} - 500). None"
                )
            return 400, {
                "error": {
                    "message": message,
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            }
        n = 1 if self.mode == "fewer" else int(body.get("n", 1))
        request = GenerationRequest(
            messages=body["messages"],
            max_tokens=body.get("max_tokens", 512),
            temperature=body.get("temperature", 0.0),
            seed=body.get("seed"),
            stop=tuple(body.get("stop") or ()),
            n=n,
        )
        generations = self.lm.generate([request])[0]
        return 200, {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "served"),
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": g.text},
                    "finish_reason": g.finish_reason,
                    "logprobs": None,
                }
                for i, g in enumerate(generations)
            ],
            "usage": {
                "prompt_tokens": generations[0].prompt_tokens,
                "completion_tokens": sum(g.completion_tokens for g in generations),
                "total_tokens": generations[0].prompt_tokens
                + sum(g.completion_tokens for g in generations),
            },
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server():
    """A running server answering ``echo: <last user message>`` (``#k`` per sample)."""
    from sweworld.models import ReplayLM

    counter = {"k": 0}
    lock = threading.Lock()

    def answer(messages):
        with lock:
            counter["k"] += 1
            k = counter["k"]
        return f"echo: {messages[-1]['content']} #{k}"

    server = ChatServer(ReplayLM(answer))
    yield server
    server.close()
