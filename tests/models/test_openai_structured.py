"""Structured output and whole-choice scoring of :class:`OpenAILM`, against a small real HTTP
server on loopback that reads requests and answers as vLLM 0.32's OpenAI server does
(``structured_outputs``, ``response_format``, ``logprobs``, ``prompt_logprobs``); and SWT
and SWR asking for their schemas through it."""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sweworld.models.base import GenerationRequest, LogprobsUnsupported, choice_probabilities
from sweworld.models.openai_lm import OpenAILM
from tests.conftest import requires_sandbox

TOKEN_RE = re.compile(r"\s?\w+|\s?[^\w\s]|\s+")


def tokens_of(text: str) -> list[str]:
    """The stand-in server's tokenizer: words with their leading space, punctuation alone."""
    return TOKEN_RE.findall(text)


class VLLMLike:
    """A loopback server answering ``/v1/chat/completions`` as vLLM does; ``respond(body)``
    gives the assistant's content of a generation request."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.respond = lambda body: "hello"
        self.token_logprob: dict[str, float] = {}
        self.first_token = {" true": -0.2, " false": -1.8}
        self.with_prompt_logprobs = True
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = json.loads(raw)
                outer.bodies.append(body)
                status, answer = outer.answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def error(self, message: str) -> tuple[int, dict[str, Any]]:
        return 400, {"error": {"message": message, "type": "BadRequestError", "code": 400}}

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        # the request checks vLLM makes (chat_completion/protocol.py)
        structured = body.get("structured_outputs")
        if structured is not None:
            kinds = [k for k in ("json", "regex", "choice") if structured.get(k) is not None]
            if len(kinds) != 1:
                return self.error("You can only use one kind of constraints for structured outputs")
        fmt = body.get("response_format")
        if fmt is not None and fmt.get("type") == "json_schema" and not fmt.get("json_schema"):
            return self.error("When response_format type is 'json_schema', ...")
        if body.get("top_logprobs") and not body.get("logprobs"):
            return self.error("when using `top_logprobs`, `logprobs` must be set to true.")
        if body.get("continue_final_message") and body.get("add_generation_prompt"):
            return self.error("Cannot set both `continue_final_message` and generation prompt")
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
        out: dict[str, Any] = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
        if body.get("logprobs"):  # one token, with the alternatives
            top = [{"token": t, "logprob": v, "bytes": None} for t, v in self.first_token.items()]
            best = max(top, key=lambda e: e["logprob"])
            choice["message"] = {"role": "assistant", "content": best["token"]}
            choice["logprobs"] = {"content": [{**best, "top_logprobs": top}]}
            return 200, out
        if body.get("prompt_logprobs") is not None:
            content = body["messages"][-1]["content"]
            choice["message"] = {"role": "assistant", "content": "x"}
            if self.with_prompt_logprobs:
                out["prompt_logprobs"] = [None] + [
                    {str(i): {"logprob": self.token_logprob.get(t, -1.0), "rank": 3,
                              "decoded_token": t}}
                    for i, t in enumerate(tokens_of(content))
                ]  # fmt: skip
            return 200, out
        text = self.respond(body)
        choice["message"] = {"role": "assistant", "content": text}
        return 200, out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    s = VLLMLike()
    yield s
    s.close()


@pytest.fixture
def make_lm(server):
    made: list[OpenAILM] = []

    def make(**kw: Any) -> OpenAILM:
        lm = OpenAILM(server.url, "swt", max_retries=0, timeout=10, **kw)
        made.append(lm)
        return lm

    yield make
    for lm in made:
        lm.close()


MESSAGES = [{"role": "user", "content": "run it"}]
SCHEMA = {
    "type": "object",
    "properties": {"stdout": {"type": "string"}, "exit_code": {"type": "integer"}},
    "required": ["stdout", "exit_code"],
}


# ---------------------------------------------------------------- request fields


def test_json_schema_is_sent_as_vllm_structured_outputs(server, make_lm):
    server.respond = lambda body: '{"stdout": "ok", "exit_code": 0}'
    (gen,) = make_lm().generate([GenerationRequest(messages=MESSAGES, json_schema=SCHEMA)])[0]
    (body,) = server.bodies
    assert body["structured_outputs"] == {"json": SCHEMA}
    assert "guided_json" not in body and "response_format" not in body  # removed in vLLM 0.32
    assert json.loads(gen.text) == {"stdout": "ok", "exit_code": 0}
    assert gen.info["structured"] == "json_schema"


def test_choices_are_sent_as_vllm_choice(server, make_lm):
    server.respond = lambda body: body["structured_outputs"]["choice"][1]
    request = GenerationRequest(messages=MESSAGES, choices=("true", "false"))
    (gen,) = make_lm().generate([request])[0]
    assert server.bodies[0]["structured_outputs"] == {"choice": ["true", "false"]}
    assert gen.text == "false" and gen.info["structured"] == "choice"


def test_response_format_mode_for_openai_servers(server, make_lm):
    server.respond = lambda body: '"false"'  # a JSON string, as a schema of one enum gives
    lm = make_lm(structured_output="response_format")
    (gen,) = lm.generate([GenerationRequest(messages=MESSAGES, choices=("true", "false"))])[0]
    fmt = server.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["schema"] == {"type": "string", "enum": ["true", "false"]}
    assert "structured_outputs" not in server.bodies[0]
    assert gen.text == "false"  # read back from the JSON string
    server.respond = lambda body: '{"stdout": "", "exit_code": 1}'
    lm.generate([GenerationRequest(messages=MESSAGES, json_schema=SCHEMA)])
    assert server.bodies[1]["response_format"]["json_schema"]["schema"] == SCHEMA


def test_off_mode_and_environment_default(server, make_lm, monkeypatch):
    make_lm(structured_output="off").generate(
        [GenerationRequest(messages=MESSAGES, json_schema=SCHEMA)]
    )
    monkeypatch.setenv("SWEWORLD_LM_STRUCTURED", "off")
    (gen,) = make_lm().generate([GenerationRequest(messages=MESSAGES, choices=("a", "b"))])[0]
    for body in server.bodies:
        assert "structured_outputs" not in body and "response_format" not in body
    assert "structured" not in gen.info


def test_plain_requests_carry_no_structured_fields(server, make_lm):
    make_lm().generate([GenerationRequest(messages=MESSAGES)])
    assert "structured_outputs" not in server.bodies[0]


def test_bad_structured_requests_are_refused():
    with pytest.raises(ValueError, match="not both"):
        GenerationRequest(messages=MESSAGES, json_schema=SCHEMA, choices=("a", "b"))
    with pytest.raises(ValueError):
        GenerationRequest(messages=MESSAGES, choices=("a", "a"))
    with pytest.raises(ValueError):
        GenerationRequest(messages=MESSAGES, json_schema="{}")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="structured_output"):
        OpenAILM("http://127.0.0.1:9", "m", structured_output="guided")
    with pytest.raises(ValueError, match="choice_scoring"):
        OpenAILM("http://127.0.0.1:9", "m", choice_scoring="all")
    request = GenerationRequest(messages=MESSAGES, choices=["x", "y"])
    assert GenerationRequest.from_dict(request.to_dict()) == request


# ---------------------------------------------------------------- choice scoring


def test_whole_choice_scoring_sums_prompt_logprobs(server, make_lm):
    server.token_logprob = {
        "PASSED": -0.5,
        '"': -0.1,
        "FAILED": -2.0,
        " true": -0.3,
        " false": -1.5,
    }
    lm = make_lm(choice_scoring="prompt")
    prefix = '{"tests": {"t1": "'
    scores = lm.choice_logprobs(MESSAGES, ['PASSED"', 'FAILED"'], prefix=prefix)
    assert scores == pytest.approx({'PASSED"': -0.6, 'FAILED"': -2.1})  # two tokens each
    assert len(server.bodies) == 2  # one request per choice
    # The choices are scored by concurrent requests: the server sees them in any order.
    sent = sorted(server.bodies, key=lambda body: body["messages"][-1]["content"])
    for body, choice in zip(sent, ['FAILED"', 'PASSED"'], strict=True):
        assert body["messages"][-1] == {"role": "assistant", "content": prefix + choice}
        assert body["prompt_logprobs"] == 0 and body["max_tokens"] == 1
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    resolved = lm.choice_logprobs(MESSAGES, ["true", "false"], prefix='{"resolved": ')
    assert choice_probabilities(resolved)["true"] == pytest.approx(1 / (1 + math.exp(-1.5 + 0.3)))


def test_whole_choice_scoring_without_prompt_logprobs_says_so(server, make_lm):
    server.with_prompt_logprobs = False
    with pytest.raises(LogprobsUnsupported, match="prompt log-probabilities"):
        make_lm(choice_scoring="prompt").choice_logprobs(MESSAGES, ["true", "false"])


def test_first_token_scoring_is_the_default(server, make_lm):
    scores = make_lm().choice_logprobs(MESSAGES, ["true", "false"], prefix='{"resolved": ')
    assert scores == {"true": -0.2, "false": -1.8}
    (body,) = server.bodies
    assert body["logprobs"] is True and body["max_tokens"] == 1


# ---------------------------------------------------------------- SWT and SWR through it


def _fill(schema: dict[str, Any]) -> Any:
    """A value of ``schema``, as a decoder constrained by it writes one."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties", {})
        return {k: _fill(v) for k, v in props.items()}
    return {"string": "", "integer": 0, "boolean": True}[kind]


def test_swr_asks_for_its_report_schema_and_scores_remotely(server, make_lm, toy_tasks):
    from sweworld.reward.stages.simulated_tests import SimulatedTestsStage
    from sweworld.reward.types import CandidateView, ChangedFile, RewardContext
    from sweworld.tasks.toy import toy_data_dir

    task = toy_tasks[0]
    server.respond = lambda body: json.dumps(_fill(body["structured_outputs"]["json"]))
    ctx = RewardContext(
        task=task,
        candidate=CandidateView(
            patch=task.patch, files=[ChangedFile(path=p) for p in task.patch_files()]
        ),
        mode="oracle",
        base_dir=toy_data_dir() / "repo",
    )
    result = SimulatedTestsStage(make_lm(), samples=1).run(ctx)
    generate, score = server.bodies
    schema = generate["structured_outputs"]["json"]
    assert set(schema["properties"]) == {"tests", "resolved"}
    assert set(schema["properties"]["tests"]["required"]) == set(
        task.FAIL_TO_PASS + task.PASS_TO_PASS
    )
    assert generate["messages"][-1]["role"] == "user"  # no prefill for a server
    assert score["logprobs"] is True and score["continue_final_message"] is True
    assert result.verdict == "pass", result.message
    assert result.evidence["samples_parsed"] == 1
    assert result.evidence["p_logprob"] == pytest.approx(1 / (1 + math.exp(-1.6)))


def test_swr_blind_schema_allows_any_test_ids():
    from sweworld.reward.swr.prompt import swr_report_schema

    blind = swr_report_schema((), with_reasoning=True)
    assert list(blind["properties"]) == ["reasoning", "tests", "resolved"]
    assert blind["properties"]["tests"]["additionalProperties"]["enum"][0] == "PASSED"


@requires_sandbox
def test_swt_asks_for_its_json_schema(server, make_lm, manager, toy_task):
    from sweworld.transition.prompt import swt_json_schema
    from sweworld.transition.simulated import SimulatedExecutor

    server.respond = lambda body: json.dumps({"stdout": "a-b\n", "stderr": "", "exit_code": 0})
    cmd = "python -c 'from stockroom.textutil import slugify; print(slugify(\"A b\"))'"
    with manager.open(toy_task, executor=SimulatedExecutor(make_lm())) as session:
        out = session.run(cmd)
    assert (out.stdout, out.exit_code) == ("a-b\n", 0)
    (body,) = server.bodies
    assert body["structured_outputs"] == {"json": swt_json_schema()}
    assert next(iter(swt_json_schema(with_reasoning=True)["properties"])) == "reasoning"
