"""Stage 4, simulated tests: scripted model reports graded by the shared grader, oracle and
blind, bad output, LM failures, log-probabilities, constrained decoding, and one run of the
real embedded model."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from sweworld.models import ContextTooLong, LMUnavailable, ReplayLM
from sweworld.models.base import BaseLM, Generation
from sweworld.reward.stages.simulated_tests import SimulatedTestsStage
from sweworld.reward.swr import SWR_PREFILL, SWRPromptConfig, swr_target
from sweworld.reward.types import CandidateView, ChangedFile, RewardContext
from sweworld.tasks.toy import toy_data_dir
from sweworld.world import swr_lm_from_spec


def context(task, patch=None, mode="oracle", base_dir=True) -> RewardContext:
    patch = task.patch if patch is None else patch
    files = [ChangedFile(path=p) for p in task.patch_files()] if patch == task.patch else []
    return RewardContext(
        task=task,
        candidate=CandidateView(patch=patch, files=files),
        mode=mode,
        base_dir=toy_data_dir() / "repo" if base_dir else None,
    )


def report(task, f2p="PASSED", p2p="PASSED", resolved=True, **extra) -> str:
    tests = {t: f2p for t in task.FAIL_TO_PASS}
    tests.update({t: p2p for t in task.PASS_TO_PASS})
    tests.update(extra)
    return swr_target(tests, resolved)


def entry(result):
    (value,) = result.evidence["report"].values()
    return value


# ---------------------------------------------------------------- grading


def test_all_fail_to_pass_passing_is_resolved(toy_tasks):
    task = toy_tasks[0]
    lm = ReplayLM([report(task)] * 3)
    result = SimulatedTestsStage(lm, samples=3, use_logprobs=False).run(context(task))
    assert result.stage == "tests" and result.verdict == "pass"
    assert result.score == 1.0
    evidence = result.evidence
    assert evidence["p_samples"] == 1.0 and evidence["p_logprob"] is None
    assert evidence["samples_resolved"] == 3 and evidence["samples_parsed"] == 3
    report_entry = entry(result)
    assert report_entry["resolved"] is True and report_entry["patch_successfully_applied"]
    assert report_entry["tests_status"]["FAIL_TO_PASS"]["success"] == task.FAIL_TO_PASS
    assert f"PASSED {task.FAIL_TO_PASS[0]}" in evidence["log"]
    assert "10 passed" in evidence["log"]
    # three samples: one sampled request, n=3, seeded, no prefill for a replayed model
    (request,) = lm.calls
    assert (request.n, request.temperature, request.seed) == (3, 0.7, 0)
    assert request.messages[-1]["role"] == "user" and evidence["prefill"] == ""
    assert evidence["mode"] == "oracle" and evidence["prompt_version"] == "swr-v1"
    assert evidence["decoding"] == "generate" and evidence["prompt_tokens"] > 0
    assert result.latency_s > 0


def test_one_failing_fail_to_pass_is_unresolved(toy_tasks):
    task = toy_tasks[2]  # three FAIL_TO_PASS tests
    failing = report(task, **{task.FAIL_TO_PASS[1]: "FAILED"})
    result = SimulatedTestsStage(ReplayLM([failing]), samples=1, use_logprobs=False).run(
        context(task)
    )
    assert result.verdict == "fail" and result.score == 0.0
    status = entry(result)["tests_status"]
    assert status["FAIL_TO_PASS"]["failure"] == [task.FAIL_TO_PASS[1]]
    assert len(status["FAIL_TO_PASS"]["success"]) == 2
    assert entry(result)["resolved"] is False
    assert result.evidence["samples"][0]["resolved"] is False


def test_p_is_the_share_of_resolved_samples(toy_tasks):
    task = toy_tasks[0]
    lm = ReplayLM([report(task), report(task, f2p="FAILED", resolved=False), report(task)])
    result = SimulatedTestsStage(lm, samples=3, use_logprobs=False).run(context(task))
    assert result.score == pytest.approx(2 / 3) and result.verdict == "pass"
    assert [s["resolved"] for s in result.evidence["samples"]] == [True, False, True]
    assert result.evidence["representative"] == 0  # first sample of the majority verdict
    # a broken PASS_TO_PASS test also fails the candidate
    broken = report(task, **{task.PASS_TO_PASS[3]: "ERROR"})
    result = SimulatedTestsStage(ReplayLM([broken]), samples=1, use_logprobs=False).run(
        context(task)
    )
    assert result.score == 0.0
    assert entry(result)["tests_status"]["PASS_TO_PASS"]["failure"] == [task.PASS_TO_PASS[3]]


def test_omitted_tests_default_to_their_status_before_the_fix(toy_tasks):
    task = toy_tasks[1]
    only_f2p = swr_target({t: "PASSED" for t in task.FAIL_TO_PASS}, True)
    result = SimulatedTestsStage(ReplayLM([only_f2p]), samples=1, use_logprobs=False).run(
        context(task)
    )
    # PASS_TO_PASS passed before the fix: assumed still passing
    assert result.score == 1.0
    assert result.evidence["samples"][0]["defaulted"] == {
        "FAIL_TO_PASS": 0,
        "PASS_TO_PASS": len(task.PASS_TO_PASS),
    }
    only_p2p = swr_target({t: "PASSED" for t in task.PASS_TO_PASS}, True)
    result = SimulatedTestsStage(ReplayLM([only_p2p]), samples=1, use_logprobs=False).run(
        context(task)
    )
    # FAIL_TO_PASS failed before the fix: not credited unless the report says so
    assert result.score == 0.0 and result.verdict == "fail"
    assert entry(result)["tests_status"]["FAIL_TO_PASS"]["failure"] == task.FAIL_TO_PASS


# ---------------------------------------------------------------- bad output


def test_garbage_and_truncated_reports(toy_tasks):
    task = toy_tasks[0]
    good = report(task)
    truncated = good[: good.index(task.PASS_TO_PASS[2])]  # cut off in the middle of the tests
    lm = ReplayLM([good, "I think the tests pass!", truncated])
    result = SimulatedTestsStage(lm, samples=3, use_logprobs=False).run(context(task))
    samples = result.evidence["samples"]
    assert samples[1]["parse_error"] and samples[1]["resolved"] is False
    assert samples[2]["parse_error"] is None
    assert "unterminated object closed" in samples[2]["repairs"]
    assert samples[2]["resolved"] is True  # the tests it did not reach were passing before
    assert result.score == pytest.approx(2 / 3)
    everything_bad = ReplayLM(["nope", '{"stdout": "1 passed"}', ""])
    result = SimulatedTestsStage(everything_bad, samples=3, use_logprobs=False).run(context(task))
    assert result.verdict == "error" and result.score is None
    assert "no readable report in 3 sample(s)" in result.message
    assert entry(result)["resolved"] is False  # an unresolved report all the same


def test_lm_errors_give_error_verdicts(toy_tasks):
    task = toy_tasks[0]

    def down(messages):
        raise LMUnavailable("http://gpu:8000/v1 is unavailable after 4 attempts")

    result = SimulatedTestsStage(ReplayLM(down), samples=3).run(context(task))
    assert result.verdict == "error" and result.score is None
    assert "LMUnavailable" in result.message and "unavailable" in result.evidence["error"]
    exhausted = SimulatedTestsStage(ReplayLM([]), samples=1).run(context(task))
    assert exhausted.verdict == "error"
    broken_spec = SimulatedTestsStage(swr_lm_from_spec("nonsense:spec"), samples=1).run(
        context(task)
    )
    assert broken_spec.verdict == "error" and "no SWR model" in broken_spec.message
    no_task = SimulatedTestsStage(ReplayLM([report(task)]), samples=1).run(
        RewardContext(task=None, candidate=CandidateView(patch=task.patch))
    )
    assert no_task.verdict == "error"  # never raises


class WindowLM(BaseLM):
    """Answers a fixed report, or raises ContextTooLong for prompts over ``limit`` chars."""

    supports_logprobs = False

    def __init__(self, answer: str, limit: int):
        self.name, self.context_window = "window", limit // 4
        self.answer, self.limit, self.sizes = answer, limit, []

    def count_tokens(self, text: str) -> int:
        return (len(text) + 3) // 4

    def generate(self, requests):
        out = []
        for request in requests:
            size = sum(len(m["content"]) for m in request.messages)
            self.sizes.append(size)
            if size > self.limit:
                raise ContextTooLong(f"{size} chars", prompt_tokens=size // 4)
            out.append([Generation(text=self.answer) for _ in range(request.n)])
        return out


def test_context_too_long_shrinks_the_budgets_once(toy_tasks):
    task = toy_tasks[3]
    config = SWRPromptConfig(total_tokens=1600)  # the toy prompt fills it: halving cuts it
    unlimited = WindowLM(report(task), 10**9)
    SimulatedTestsStage(unlimited, samples=1, config=config).run(context(task))
    lm = WindowLM(report(task), unlimited.sizes[0] - 400)
    result = SimulatedTestsStage(lm, samples=1, config=config).run(context(task))
    assert result.verdict == "pass" and result.evidence["budgets_shrunk"] is True
    assert len(lm.sizes) == 2 and lm.sizes[1] < lm.sizes[0]
    assert result.evidence["logprob_error"]  # this backend gives none: samples only
    hopeless = SimulatedTestsStage(WindowLM(report(task), 100), samples=1).run(context(task))
    assert hopeless.verdict == "error" and "ContextTooLong" in hopeless.message
    assert hopeless.evidence["budgets_shrunk"] is True
    # budgets so small that no changed line of the candidate fits: no verdict (a patch padded
    # to push its change out of the model's sight gains nothing)
    tiny = SimulatedTestsStage(lm, samples=1, config=SWRPromptConfig(total_tokens=450))
    hidden = tiny.run(context(task))
    assert hidden.verdict == "error" and hidden.score is None
    assert hidden.evidence["files_not_shown"] == ["stockroom/csvio.py"]
    assert hidden.evidence["patch_shown"] == 0.0


def test_empty_candidate_scores_zero_without_the_model(toy_tasks):
    task = toy_tasks[0]
    lm = ReplayLM([report(task)])
    for patch in ("", "   \n", "not a diff at all"):
        result = SimulatedTestsStage(lm, samples=3).run(context(task, patch=patch))
        assert result.verdict == "fail" and result.score == 0.0
        assert result.evidence["empty_patch"] is True and entry(result)["resolved"] is False
    assert lm.calls == []


# ---------------------------------------------------------------- oracle and blind


def test_oracle_and_blind_prompts(toy_tasks):
    task = toy_tasks[0]
    oracle_lm = ReplayLM([report(task)])
    SimulatedTestsStage(oracle_lm, samples=1, use_logprobs=False).run(context(task))
    blind_lm = ReplayLM(['{"tests": {}, "resolved": false}'])
    SimulatedTestsStage(blind_lm, samples=1, use_logprobs=False).run(context(task, mode="blind"))
    oracle_text = oracle_lm.calls[0].messages[1]["content"]
    blind_text = blind_lm.calls[0].messages[1]["content"]
    gold_line = "+    return slug.strip(separator)"
    assert "<gold_patch>" in oracle_text and gold_line in oracle_text
    assert "<gold_patch>" not in blind_text and "<tests>" not in blind_text
    assert task.FAIL_TO_PASS[0] not in blind_text
    assert gold_line in blind_text  # the candidate here is the gold fix: shown as the candidate
    assert oracle_lm.calls[0].temperature == 0.0  # one sample: greedy
    assert oracle_lm.calls[0].max_tokens < blind_lm.calls[0].max_tokens * 4


def test_blind_verdict_needs_the_models_resolved(toy_tasks):
    task = toy_tasks[0]
    ids = ["tests/test_textutil.py::test_slugify_simple_words", "tests/test_textutil.py::test_x"]
    cases = [
        (swr_target({ids[0]: "PASSED", ids[1]: "PASSED"}, True), 1.0),
        (swr_target({ids[0]: "PASSED", ids[1]: "PASSED"}, False), 0.0),  # the model says no
        (swr_target({ids[0]: "PASSED", ids[1]: "FAILED"}, True), 0.0),  # a reported failure
        ('{"tests": {"' + ids[0] + '": "ok", "' + ids[1] + '": "ok"', 1.0),  # inferred
    ]
    for text, expected in cases:
        result = SimulatedTestsStage(ReplayLM([text]), samples=1, use_logprobs=False).run(
            context(task, mode="blind")
        )
        assert result.score == expected, text
        assert result.evidence["mode"] == "blind"
        assert entry(result)["tests_status"]["FAIL_TO_PASS"] == {"success": [], "failure": []}


def test_an_empty_blind_report_is_no_evidence_not_a_pass(toy_tasks):
    """``{"tests": {}, "resolved": true}`` names no test: not a pass (it was scored 1.0)."""
    task = toy_tasks[0]
    for logprobs in (None, {"true": 0.0, "false": math.log(1e-9)}):
        lm = ReplayLM(['{"tests": {}, "resolved": true}'] * 2, logprobs=logprobs)
        result = SimulatedTestsStage(lm, samples=2).run(context(task, mode="blind"))
        assert result.verdict == "error" and result.score is None
        assert "names no test" in result.message
        assert entry(result)["resolved"] is False
        assert entry(result)["sweworld_status"] == "no_test_results"


# ---------------------------------------------------------------- log-probabilities


def test_logprobs_are_averaged_with_the_samples(toy_tasks):
    task = toy_tasks[0]
    lm = ReplayLM([report(task)] * 3, logprobs={"true": math.log(0.2), "false": math.log(0.8)})
    result = SimulatedTestsStage(lm, samples=3).run(context(task))
    assert result.evidence["p_samples"] == 1.0
    assert result.evidence["p_logprob"] == pytest.approx(0.2)
    assert result.score == pytest.approx(0.6) and result.verdict == "pass"
    ((messages, choices, prefix),) = lm.logprob_calls
    assert choices == ["true", "false"] and messages == lm.calls[0].messages
    assert prefix.startswith(SWR_PREFILL) and prefix.endswith(', "resolved": ')
    # derived from the replayed text when nothing is scripted: the report said false
    derived = ReplayLM([report(task, f2p="FAILED", resolved=False)])
    result = SimulatedTestsStage(derived, samples=1).run(context(task))
    assert result.evidence["p_logprob"] == pytest.approx(0.1)
    assert result.score == pytest.approx(0.05)
    off = SimulatedTestsStage(ReplayLM([report(task)], logprobs={"true": 0.0}), samples=1)
    off.use_logprobs = False
    assert off.run(context(task)).evidence["p_logprob"] is None


def test_constrained_decoding_chooses_each_status(toy_tasks):
    task = toy_tasks[2]
    failing = task.FAIL_TO_PASS[0]

    def score(messages, choices, prefix):
        if choices == ["true", "false"]:
            return {"true": math.log(0.3), "false": math.log(0.7)}
        wants = "FAILED" if prefix.endswith(f'"{failing}": "') else "PASSED"
        return {c: (math.log(0.9) if c.startswith(wants) else math.log(0.1 / 3)) for c in choices}

    lm = ReplayLM([], logprobs=score)
    stage = SimulatedTestsStage(lm, samples=1, decoding="constrained")
    result = stage.run(context(task))
    assert lm.calls == []  # nothing generated: every report is chosen, test by test
    shown = result.evidence["expected_tests"]
    assert len(lm.logprob_calls) == shown + 1
    sample = result.evidence["samples"][0]
    assert sample["parse_error"] is None and sample["repairs"] == []
    assert sample["statuses"][failing] == "FAILED"
    assert sample["p_pass"][failing] == pytest.approx(0.1 / 3, abs=1e-4)  # rounded
    assert sample["resolved_model"] is False and result.evidence["decoding"] == "constrained"
    assert result.evidence["p_logprob"] == pytest.approx(0.3)
    assert result.score == pytest.approx(0.15) and result.verdict == "fail"
    # sampled: seeded, reproducible
    runs = [
        SimulatedTestsStage(ReplayLM([], logprobs=score), samples=3, seed=5, decoding="constrained")
        .run(context(task))
        .evidence["samples"]
        for _ in range(2)
    ]
    assert [s["statuses"] for s in runs[0]] == [s["statuses"] for s in runs[1]]
    # blind mode has no list to choose for: it generates
    blind = ReplayLM(['{"tests": {}, "resolved": true}'], logprobs=score)
    result = SimulatedTestsStage(blind, samples=1, decoding="constrained").run(
        context(task, mode="blind")
    )
    assert result.evidence["decoding"] == "generate" and len(blind.calls) == 1
    with pytest.raises(ValueError):
        SimulatedTestsStage(blind, decoding="beam")


def test_lm_from_a_spec_string(toy_tasks, tmp_path):
    task = toy_tasks[0]
    recorded = tmp_path / "answers.jsonl"
    answer = swr_target({task.FAIL_TO_PASS[0]: "PASSED"}, True)
    recorded.write_text(json.dumps({"text": answer}) + "\n")
    lazy = swr_lm_from_spec(f"replay:{recorded}")
    stage = SimulatedTestsStage(lazy, samples=1, use_logprobs=False)
    assert not lazy.loaded  # built on first use
    result = stage.run(context(task))
    assert result.score == 1.0 and isinstance(stage.lm, ReplayLM) and lazy.loaded
    # only in-process models are shared
    assert swr_lm_from_spec(f"replay:{recorded}", lazy=False) is not stage.lm
    stage.close()
    lazy.close()


@pytest.mark.parametrize("spec", [None, "embedded", "replay:x.jsonl"])
def test_a_spec_is_for_the_world_to_build(spec):
    with pytest.raises(TypeError, match="swr_lm_from_spec"):
        SimulatedTestsStage(spec)


# ---------------------------------------------------------------- the embedded model


@pytest.fixture(scope="module")
def embedded_lm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sweworld.models.embedded import embedded_model_path

    try:
        embedded_model_path()
    except LMUnavailable as exc:
        pytest.skip(str(exc))
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # robust on a shared machine (see tests/transition/test_lm.py)
    yield swr_lm_from_spec("embedded", lazy=False)
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_embedded_model_gives_a_probability_in_bounded_time(toy_tasks, embedded_lm):
    task = toy_tasks[0]
    assert swr_lm_from_spec("embedded", lazy=False) is embedded_lm  # one model per process
    started = time.perf_counter()
    oracle = SimulatedTestsStage(swr_lm_from_spec("embedded"), samples=1).run(context(task))
    assert oracle.verdict in ("pass", "fail"), oracle.message
    assert 0.0 <= oracle.score <= 1.0
    assert oracle.evidence["decoding"] == "constrained"
    assert oracle.evidence["p_logprob"] is not None
    assert oracle.evidence["samples"][0]["parse_error"] is None  # constrained: well formed
    blind = SimulatedTestsStage(embedded_lm, samples=1, max_tokens=24).run(
        context(task, mode="blind")
    )
    assert blind.evidence["prefill"] == SWR_PREFILL and blind.evidence["decoding"] == "generate"
    assert blind.verdict in ("pass", "fail", "error")
    assert blind.score is None or 0.0 <= blind.score <= 1.0
    assert time.perf_counter() - started < 240


# ---------------------------------------------------------------- token counting


def test_prompt_budgets_use_the_models_own_token_counter(toy_tasks):
    """With the loaded model's ``count_tokens`` the budgets are the model's tokens: a counter
    that sees four times more tokens than chars/4 leaves a shorter prompt."""
    task = toy_tasks[3]
    config = SWRPromptConfig(total_tokens=4000)
    approx = ReplayLM([report(task)])  # no tokenizer: chars / 4
    exact = ReplayLM([report(task)], tokenizer=len)  # one token per character
    sizes = {}
    for name, lm in (("approx", approx), ("exact", exact)):
        result = SimulatedTestsStage(lm, samples=1, config=config).run(context(task))
        assert result.evidence["token_counter"] == "model"
        sizes[name] = sum(len(m["content"]) for m in lm.calls[0].messages)
    assert sizes["exact"] < sizes["approx"]

    class NoCounter:
        """An LM without ``count_tokens``: the stage falls back to the approximate counter."""

        name = "no-counter"
        supports_logprobs = False

        def __init__(self):
            self.inner = ReplayLM([report(task)])

        def generate(self, requests, **kwargs):
            return self.inner.generate(requests)

        def close(self):
            pass

    result = SimulatedTestsStage(NoCounter(), samples=1, config=config).run(context(task))
    assert result.evidence["token_counter"] == "approx" and result.verdict == "pass"


def test_a_model_that_hangs_cannot_hold_the_caller(toy_tasks):
    """The whole stage has a deadline: past it, no verdict (error, timed_out) and the call
    returns; the late answer is dropped and the stage stays usable."""
    import threading

    task = toy_tasks[0]
    release = threading.Event()

    def hang(messages):
        release.wait(30)
        return report(task)

    stage = SimulatedTestsStage(ReplayLM(hang), samples=1, use_logprobs=False, timeout_s=0.5)
    started = time.perf_counter()
    result = stage.run(context(task))
    assert time.perf_counter() - started < 5
    assert result.verdict == "error" and result.evidence["timed_out"] is True
    assert "did not finish within 0.5 s" in result.message
    release.set()
    quick = SimulatedTestsStage(ReplayLM([report(task)]), samples=1, use_logprobs=False)
    assert quick.run(context(task)).verdict == "pass"
    with pytest.raises(ValueError, match="timeout_s"):
        SimulatedTestsStage(ReplayLM([]), timeout_s=0)


def test_reward_model_with_a_hanging_model_is_undetermined(toy_tasks):
    import threading

    from sweworld.reward.model import RewardModel, SWRConfig

    task = toy_tasks[0]
    release = threading.Event()

    def hang(messages):
        release.wait(30)
        return report(task)

    config = SWRConfig(mode="oracle", stages=("syntax", "tests"), tests_timeout_s=0.5, verdict=None)
    started = time.perf_counter()
    with RewardModel(config, lm=ReplayLM(hang)) as model:
        result = model.score(task, task.patch)
    release.set()
    assert time.perf_counter() - started < 30
    assert not result.resolved
    assert result.stages["tests"].verdict == "error"
