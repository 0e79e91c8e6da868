"""Structured logs of the world service: JSON lines, request ids, no secrets."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from sweworld.serve.world import logs
from sweworld.serve.world.logs import (
    JsonFormatter,
    RequestIdMiddleware,
    add_secrets,
    bind,
    configure_logging,
    redact,
    request_context,
    sane_request_id,
)

TOKEN = "sk-world-7f3a9c2e51b04d8e"


@pytest.fixture
def captured():
    """configure_logging into a buffer; the root logger and uvicorn's are put back after."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    access = logging.getLogger("uvicorn.access")
    saved_access = (list(access.handlers), access.propagate, access.disabled)
    buffer = io.StringIO()
    configure_logging("DEBUG", json=True, stream=buffer)
    yield buffer
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    access.handlers[:], access.propagate, access.disabled = saved_access


def lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_one_json_object_per_line_with_fields_and_tracebacks(captured):
    log = logging.getLogger("sweworld.test")
    log.info("stepped %s in %d ms\nsecond line", "ep-1", 12, extra={"episode_id": "ep-1"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    bad = logging.LogRecord("sweworld.test", logging.WARNING, __file__, 1, "odd %d", ("x",), None)
    captured.write(JsonFormatter().format(bad) + "\n")  # bad arguments: still a line
    with request_context(request_id="r-1", route="/v1/episodes"):
        log.debug("inside")
    out = lines(captured)
    assert len(out) == 4 and len(captured.getvalue().splitlines()) == 4
    first = out[0]
    assert set(first) == {"time", "level", "logger", "message", "episode_id"}
    assert first["message"] == "stepped ep-1 in 12 ms\nsecond line"
    assert first["level"] == "INFO" and first["logger"] == "sweworld.test"
    assert first["time"].endswith("+00:00")
    assert "ValueError: bad" in out[1]["exception"] and out[1]["level"] == "ERROR"
    assert "unformattable" in out[2]["message"]
    assert out[3]["request_id"] == "r-1" and out[3]["route"] == "/v1/episodes"


def test_configure_logging_twice_keeps_one_handler(captured):
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]
    assert len(ours) == 1
    text = io.StringIO()
    configure_logging("INFO", json=False, stream=text)
    logging.getLogger("sweworld.test").info("plain", extra={"status": 201})
    logging.getLogger("sweworld.test").debug("below the level")
    assert captured.getvalue() == ""  # the first handler was replaced
    assert text.getvalue().rstrip().endswith("sweworld.test: plain status=201")
    assert "below the level" not in text.getvalue()


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {TOKEN}",
        f"headers={{'authorization': 'Bearer {TOKEN}'}}",
        f"GET /x?token={TOKEN}&a=1",
        f'{{"api_key": "{TOKEN}"}}',
        f"the client sent {TOKEN} as its token",
    ],
)
def test_tokens_are_redacted(captured, text):
    add_secrets([TOKEN])
    assert TOKEN not in redact(text) and "[redacted]" in redact(text)
    assert redact(redact(text)) == redact(text)
    logging.getLogger("sweworld.test").info("seen: %s", text)
    try:
        raise RuntimeError(text)
    except RuntimeError:
        logging.getLogger("sweworld.test").exception("boom")
    assert TOKEN not in captured.getvalue()
    assert len(lines(captured)) == 2


def test_redaction_is_linear_in_its_input():
    def cost(n: int) -> float:
        text = ("token=" + "x" * 10 + " ") * n + "Bearer " * n + " " * n
        started = time.process_time()
        redact(text)
        return time.process_time() - started

    cost(1000)  # warm
    small, large = cost(20_000), cost(80_000)
    assert large < 10 * max(small, 0.005)


def test_request_id_sanity():
    assert sane_request_id("abc-123_X.y:z") == "abc-123_X.y:z"
    assert sane_request_id(b"abc") == "abc"
    for bad in ("", "a" * 129, "a b", "a\nb", "<script>", "é", b"\xff", None):
        assert sane_request_id(bad) is None


def _app():
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()
    log = logging.getLogger("sweworld.serve.world.handler")

    @app.post("/v1/episodes")
    def create(body: dict):
        bind(episode_id="ep-new")
        log.info("created")
        return {"episode_id": "ep-new"}

    @app.post("/v1/episodes/{episode_id}/step")
    def step(episode_id: str, body: dict):
        log.info("step of %s", episode_id)
        return {"observation": "ok", "request_id": logs.current_request_id()}

    @app.get("/boom")
    def boom():
        raise RuntimeError("a bug")

    logs.install(app)
    return app


def test_request_ids_are_echoed_sanitised_and_bound_to_lines(captured):
    from fastapi.testclient import TestClient

    headers = {"Authorization": f"Bearer {TOKEN}"}
    secret_body = {"action": f"echo {TOKEN}", "password": "hunter2hunter2"}
    with TestClient(_app(), raise_server_exceptions=False) as client:
        given = client.post(
            "/v1/episodes/ep-7/step", json=secret_body, headers={**headers, "X-Request-ID": "abc-1"}
        )
        assert given.headers["x-request-id"] == "abc-1"
        assert given.json()["request_id"] == "abc-1"
        fresh = [
            client.post("/v1/episodes/ep-8/step", json={}, headers={"X-Request-ID": bad})
            for bad in ("x" * 500, "a;b", "")
        ]
        ids = {r.headers["x-request-id"] for r in fresh}
        assert len(ids) == 3 and all(sane_request_id(i) for i in ids)
        assert not ids & {"x" * 500, "a;b", ""}
        created = client.post("/v1/episodes", json={"task": {"x": 1}}, headers=headers)
        assert created.status_code == 200
        assert client.get("/boom").status_code == 500
        assert client.get("/v1/nothing/here?token=abc").status_code == 404
    out = [line for line in lines(captured) if not line["logger"].startswith("httpx")]
    text = json.dumps(out)  # the server's lines (the test client logs its own URLs)
    assert TOKEN not in captured.getvalue() and "hunter2" not in captured.getvalue()
    assert TOKEN not in text and "hunter2" not in text and "echo" not in text
    by_request = [line for line in out if line.get("request_id") == "abc-1"]
    handler_line, access_line = by_request
    assert handler_line["message"] == "step of ep-7"
    assert access_line["logger"] == "sweworld.serve.world.access"
    assert access_line["route"] == "/v1/episodes/{episode_id}/step"
    assert access_line["status"] == 200 and access_line["episode_id"] == "ep-7"
    assert access_line["method"] == "POST" and access_line["latency_ms"] >= 0
    access = [line for line in out if line["logger"] == "sweworld.serve.world.access"]
    assert len(access) == 7
    create_access = next(a for a in access if a["route"] == "/v1/episodes")
    assert create_access["episode_id"] == "ep-new"  # bound by the handler
    boom = next(a for a in access if a["route"] == "/boom")
    assert boom["status"] == 500 and boom["level"] == "ERROR"
    assert next(a for a in access if a["route"] == "<unmatched>")["status"] == 404
    assert "/v1/nothing" not in text and "token=abc" not in text  # no raw paths, no queries


def test_plain_asgi_without_starlette_router(captured):
    """The middleware is plain ASGI: a bare app gets an id and an access line too."""
    import asyncio

    async def bare(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": "GET", "path": "/x", "headers": [(b"x-request-id", b"q1")]}
    asyncio.run(RequestIdMiddleware(bare)(scope, receive, send))
    assert (b"x-request-id", b"q1") in sent[0]["headers"] and (b"x-a", b"1") in sent[0]["headers"]
    (line,) = [line for line in lines(captured) if line["logger"] == logs.ACCESS_LOGGER]
    assert line["request_id"] == "q1" and line["status"] == 204 and line["route"] == "<unmatched>"
