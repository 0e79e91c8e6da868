"""Training examples are the inference format: same prompt tokens, loss only on the answer."""

from __future__ import annotations

import json

import pytest

from sweworld.train.examples import (
    IGNORE,
    SWT_PREFILL,
    Collator,
    Example,
    balance_classes,
    fit_target,
    pack,
    swr_example,
    swt_example,
    swt_messages,
)
from tests.train.conftest import make_swr_record, make_swt_record


def _target(ex: Example) -> list[int]:
    return [t for t in ex.labels if t != IGNORE]


@pytest.mark.parametrize("mode", ["oracle", "blind"])
def test_swt_prompt_is_what_inference_encodes_and_only_the_answer_is_labelled(
    embedded_lm, tokenizer, mode
):
    from sweworld.transition.validate import parse_prediction

    rec = make_swt_record(3)
    ex = swt_example(rec, mode, tokenizer)
    context = rec.context(mode)
    prompt = embedded_lm.encode_messages(swt_messages(context))
    n = ex.meta["prompt_tokens"]
    assert ex.input_ids[:n] == prompt  # byte-equal token ids with the inference backend
    assert ex.labels[:n] == [IGNORE] * n
    assert ex.labels[n:] == ex.input_ids[n:] and ex.target_tokens == len(ex) - n
    assert ex.input_ids[-1] == tokenizer.eos_token_id  # the turn ends: generation stops
    answer = tokenizer.decode(ex.input_ids[n:-1])
    pred, repairs = parse_prediction(SWT_PREFILL + answer)
    assert (pred.stdout, pred.stderr, pred.exit_code) == (rec.stdout, rec.stderr, rec.exit_code)
    assert repairs == []
    assert ("<gold_patch>" in embedded_lm.render_prompt(swt_messages(context))) == (
        mode == "oracle"
    )


def test_swt_record_without_a_context_gives_no_example(tokenizer):
    rec = make_swt_record(1)
    rec.context_blind = ""
    assert swt_example(rec, "blind", tokenizer) is None
    assert swt_example(rec, "oracle", tokenizer) is not None


def test_long_outputs_keep_head_and_tail_within_the_answer_budget(tokenizer):
    from sweworld.transition.validate import parse_prediction

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    stdout = "".join(f"tests/test_x.py::test_{i} PASSED\n" for i in range(300))
    stdout += "==== 300 passed in 0.51s ====\n"
    stderr = "warning: deprecated\n" * 40
    text, cut = fit_target(stdout, stderr, 0, count, 256)
    assert count(text) + 1 <= 256
    assert cut["stdout"] > 0 and cut["stderr"] > 0
    pred, _ = parse_prediction(SWT_PREFILL + text)
    assert pred.exit_code == 0
    assert pred.stdout.startswith("tests/test_x.py::test_0 PASSED\n")
    assert pred.stdout.rstrip("\n").endswith("==== 300 passed in 0.51s ====")  # the summary
    assert "lines cut] ..." in pred.stdout and "lines cut] ..." in pred.stderr
    short, none_cut = fit_target("ok\n", "", 0, count, 256)
    assert none_cut == {"stdout": 0, "stderr": 0} and json.loads('{"stdout":"' + short)


@pytest.mark.parametrize("resolved", [True, False])
def test_swr_oracle_labels_the_answer_token_and_the_statuses(tokenizer, toy_tasks, resolved):
    task = toy_tasks[0]
    ex = swr_example(make_swr_record(task, 0, resolved), "oracle", tokenizer)
    at = ex.meta["answer_at"]
    tail = ex.meta["choices"]["true" if resolved else "false"]
    assert ex.input_ids[at:] == tail and ex.labels[at:] == tail
    assert tokenizer.decode(tail).strip() == ("true" if resolved else "false")
    assert ex.meta["choices"]["true"] != ex.meta["choices"]["false"]
    labelled = [i for i in range(at) if ex.labels[i] != IGNORE]
    pieces = "".join(tokenizer.decode([ex.input_ids[i]]) for i in labelled)
    n_tests = ex.meta["tests"]  # the tests the prompt lists (its budget may cut the list)
    assert 1 < n_tests <= len(task.FAIL_TO_PASS) + len(task.PASS_TO_PASS)
    expected = ["PASSED"] * n_tests if resolved else ["FAILED"] + ["PASSED"] * (n_tests - 1)
    assert pieces == "".join(expected)  # the status values only, in report order
    text = tokenizer.decode(ex.input_ids[:at])
    assert text.rstrip().endswith('"resolved":')
    no_status = swr_example(
        make_swr_record(task, 0, resolved), "oracle", tokenizer, statuses_loss=False
    )
    assert [i for i, t in enumerate(no_status.labels) if t != IGNORE] == list(
        range(at, len(no_status))
    )


def test_swr_blind_labels_the_whole_report(tokenizer, toy_tasks):
    ex = swr_example(make_swr_record(toy_tasks[1], 0, True), "blind", tokenizer)
    first = next(i for i, t in enumerate(ex.labels) if t != IGNORE)
    assert all(t != IGNORE for t in ex.labels[first:])
    answer = tokenizer.decode(ex.input_ids[first:])
    assert "PASSED" in answer and answer.rstrip().endswith("true")
    assert "<gold_patch>" not in tokenizer.decode(ex.input_ids[:first])


@pytest.mark.slow
def test_swr_answer_token_is_what_the_scorer_reads(embedded_lm, tokenizer, toy_tasks):
    """The log-probabilities of true / false after the example's tokens equal those
    ``choice_logprobs`` gives for the same prompt and report (same token sequence)."""
    import torch

    from sweworld.reward.stages.simulated_tests import shown_candidate_patch
    from sweworld.reward.swr import EMBEDDED_SWR_CONFIG, build_swr_prompt, swr_resolved_prefix

    task = toy_tasks[0]
    rec = make_swr_record(task, 0, False)
    ex = swr_example(rec, "oracle", tokenizer)
    prompt = build_swr_prompt(
        task, shown_candidate_patch(rec.patch, task, "oracle"), mode="oracle",
        config=EMBEDDED_SWR_CONFIG, count_tokens=embedded_lm.count_tokens,
    )  # fmt: skip
    statuses = {t: ("FAILED" if t in task.FAIL_TO_PASS else "PASSED") for t in task.FAIL_TO_PASS}
    statuses.update({t: "PASSED" for t in prompt.expected_tests if t not in statuses})
    statuses = {t: statuses[t] for t in prompt.expected_tests}
    scored = embedded_lm.choice_logprobs(
        prompt.messages, ("true", "false"), prefix=swr_resolved_prefix(statuses)
    )
    at = ex.meta["answer_at"]
    with torch.inference_mode():
        logits = embedded_lm.model(input_ids=torch.tensor([ex.input_ids[:at]])).logits[0, -1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    for choice, tail in ex.meta["choices"].items():
        assert len(tail) == 1
        assert float(logp[tail[0]]) == pytest.approx(scored[choice], abs=1e-3)


def test_balance_classes_equalises_resolved_and_unresolved():
    items = [Example([1], [1], {"resolved": i < 2, "id": i}) for i in range(9)]
    out = balance_classes(items, seed=1)
    assert sum(e.meta["resolved"] for e in out) == sum(not e.meta["resolved"] for e in out) == 7
    assert {e.meta["id"] for e in out} == set(range(9))


def test_pack_first_fit_and_boundaries():
    exs = [Example(list(range(n)), [IGNORE] * (n - 1) + [5], {"id": n}) for n in (5, 4, 3, 7)]
    rows = pack(exs, 10)
    assert [r.meta["segments"] for r in rows] == [[5, 4], [3, 7]]
    assert rows[0].input_ids == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert rows[1].labels == [IGNORE, IGNORE, 5, *([IGNORE] * 6), 5]


def _tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_isolated_packing_computes_what_each_example_computes_alone(attn):
    import torch

    model = _tiny_llama()
    model.config._attn_implementation = attn
    exs = [Example([3, 4, 5, 6, 7], [IGNORE] * 5, {}), Example([8, 9, 10], [IGNORE] * 3, {})]
    rows = pack(exs, 16)
    assert len(rows) == 1
    dtype = model.dtype if attn == "eager" else None
    batch = Collator(0, packing="isolated", mask_dtype=dtype)([rows[0], exs[0]])
    assert batch["attention_mask"].shape == (2, 1, 8, 8)
    assert batch["position_ids"][0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]
    with torch.no_grad():
        packed = model(**{k: v for k, v in batch.items() if k != "labels"}).logits[0]
        alone = [model(input_ids=torch.tensor([e.input_ids])).logits[0] for e in exs]
    torch.testing.assert_close(packed[:5], alone[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(packed[5:8], alone[1], atol=1e-5, rtol=1e-4)
    eos = Collator(0, packing="eos")([rows[0], exs[0]])
    assert eos["attention_mask"].tolist() == [[1] * 8, [1] * 5 + [0] * 3]
    assert eos["labels"][1, 5:].tolist() == [IGNORE] * 3


def test_build_examples_leaves_out_inconsistent_and_trajectory_records_when_told(tokenizer):
    from sweworld.train.config import TrainConfig
    from sweworld.train.main import build_examples

    clean, drifted, shown = make_swt_record(1), make_swt_record(2), make_swt_record(3)
    drifted.consistent = False
    shown.state_source = "trajectory"
    config = TrainConfig(target="swt", mode="blind")
    examples, skipped = build_examples([clean, drifted, shown], config, tokenizer)
    assert len(examples) == 2
    assert skipped == {"inconsistent replay (include_inconsistent is off)": 1}
    config = TrainConfig(
        target="swt", mode="blind", include_inconsistent=True, include_trajectory_state=False
    )
    examples, skipped = build_examples([clean, drifted, shown], config, tokenizer)
    assert len(examples) == 2
    assert skipped == {"trajectory state (include_trajectory_state is off)": 1}
