"""Real (tiny) training runs on CPU with the embedded model: the adapters they write are
loaded by the simulator and the reward, by spec and as the defaults; resume; --merge."""

from __future__ import annotations

import json

import pytest

from sweworld.train.__main__ import main as train_main

FAST = [
    "--max-steps", "2", "--grad-accum", "1", "--lora-r", "4", "--lora-alpha", "8",
    "--target-modules", "q_proj,v_proj", "--mode", "oracle", "--logging-steps", "1",
    "--threads", "1",
]  # fmt: skip

# a CPU shared with other work can be several times slower than CI's
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def swt_adapter(tiny_data, tmp_path_factory, embedded_path):
    out = tmp_path_factory.mktemp("swt-adapter")
    argv = ["swt", "--data", str(tiny_data), "--out", str(out), "--save-steps", "1", "--merge"]
    assert train_main(argv + FAST) == 0
    return out


@pytest.fixture(scope="module")
def swr_adapter(tiny_data, tmp_path_factory, embedded_path):
    out = tmp_path_factory.mktemp("swr-adapter")
    assert train_main(["swr", "--data", str(tiny_data), "--out", str(out), *FAST]) == 0
    return out


def test_swt_run_writes_an_adapter_with_its_metadata(swt_adapter):
    meta = json.loads((swt_adapter / "sweworld-adapter.json").read_text())
    assert (swt_adapter / "adapter_config.json").is_file()
    assert (swt_adapter / "adapter_model.safetensors").is_file()
    assert meta["target"] == "swt" and meta["prompt_version"] == "swt-v1"
    assert meta["metrics"]["steps"] == 2
    assert meta["metrics"]["steps_this_run"] == 2 and meta["metrics"]["resumed_from"] is None
    assert meta["data"]["heldout_repos"] == ["pallets/flask"]
    before, after = meta["metrics"]["eval_before"], meta["metrics"]["eval_after"]
    assert before["n"] == after["n"] == 2  # oracle mode, two held-out records
    assert after["answer_loss"] != before["answer_loss"]  # the adapter changed the model


def test_the_simulator_loads_the_adapter_by_spec_and_as_the_default(swt_adapter, monkeypatch):
    from sweworld.models import embedded as embedded_module
    from sweworld.models import make_lm
    from sweworld.models.base import GenerationRequest

    lm = make_lm(f"embedded+{swt_adapter}")
    try:
        gen = lm.generate([GenerationRequest(messages=[{"role": "user", "content": "hi"}],
                                             max_tokens=2)])[0][0]  # fmt: skip
        assert gen.info["adapter"] == swt_adapter.name
    finally:
        lm.close()
    monkeypatch.setitem(embedded_module.DEFAULT_ADAPTERS, "swt", swt_adapter)
    assert embedded_module.default_adapter("swt") == swt_adapter
    default = make_lm("embedded")  # what `sweworld simulate` uses with no flag
    base = make_lm("embedded:base")
    try:
        assert default.adapter == swt_adapter and default.name.endswith("+" + swt_adapter.name)
        assert base.adapter is None
    finally:
        default.close()
        base.close()


def test_the_reward_stage_uses_the_swr_adapter_by_default(swr_adapter, monkeypatch, toy_tasks):
    from sweworld.models import embedded as embedded_module
    from sweworld.reward.stages.simulated_tests import SimulatedTestsStage, clear_shared_lms
    from sweworld.reward.types import RewardContext
    from tests.train.conftest import make_swr_record

    meta = json.loads((swr_adapter / "sweworld-adapter.json").read_text())
    assert meta["target"] == "swr" and meta["prompt_version"] == "swr-v1"
    assert meta["metrics"]["eval_after"]["n"] == 2  # one resolved, one not: both classes
    assert 0 <= meta["metrics"]["eval_after"]["accuracy"] <= 1
    monkeypatch.setitem(embedded_module.DEFAULT_ADAPTERS, "swr", swr_adapter)
    clear_shared_lms()
    try:
        from sweworld.world import swr_lm_from_spec

        stage = SimulatedTestsStage(swr_lm_from_spec(None), samples=1, decoding="constrained")
        from sweworld.tasks.schema import Task

        # one listed test: two short scoring passes after the prompt
        task = Task.from_row({**toy_tasks[0].to_row(), "PASS_TO_PASS": []})
        from sweworld.reward.candidate import view_candidate

        rec = make_swr_record(task, 0, True)
        ctx = RewardContext(task=task, candidate=view_candidate(rec.patch), mode="oracle")
        result = stage.run(ctx)
        assert result.evidence.get("adapter") == swr_adapter.name, result.message
        assert result.evidence["model"].endswith("+" + swr_adapter.name)
        assert result.evidence["p_logprob"] is not None
    finally:
        clear_shared_lms()


def test_resume_continues_from_the_last_checkpoint(tiny_data, swt_adapter):
    checkpoints = sorted((swt_adapter / "checkpoints").glob("checkpoint-*"))
    assert checkpoints, "save_steps=1 wrote checkpoints"
    argv = ["swt", "--data", str(tiny_data), "--out", str(swt_adapter), "--resume", "last",
            *FAST, "--max-steps", "3", "--no-eval"]  # fmt: skip
    assert train_main(argv) == 0
    metrics = json.loads((swt_adapter / "sweworld-adapter.json").read_text())["metrics"]
    assert metrics["steps"] == 3
    # resumed, not trained afresh: one step ran here, after the checkpoint of step 2
    assert metrics["resumed_from"].endswith("checkpoint-2")
    assert metrics["resumed_at_step"] == 2
    assert metrics["steps_this_run"] == 1


def test_merged_model_loads_with_transformers_and_equals_base_plus_adapter(swt_adapter):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sweworld.models.embedded import embedded_model_path

    merged_dir = swt_adapter / "merged"
    assert (merged_dir / "model.safetensors").is_file()
    tok = AutoTokenizer.from_pretrained(str(merged_dir), local_files_only=True)
    assert tok.chat_template
    merged = AutoModelForCausalLM.from_pretrained(str(merged_dir), local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(str(embedded_model_path()), local_files_only=True)
    # the merged folder was written after 2 steps; the adapter folder may have been resumed
    # further by another test, so compare with the checkpoint of step 2
    step2 = swt_adapter / "checkpoints" / "checkpoint-2"
    with_adapter = PeftModel.from_pretrained(base, str(step2))
    ids = tok("def f(x):\n    return", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        a = merged(input_ids=ids).logits
        b = with_adapter(input_ids=ids).logits
    torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)


def test_no_data_is_a_clear_error(tmp_path, capsys):
    assert train_main(["swt", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "a")]) == 2
    assert "no swt training example" in capsys.readouterr().err


def test_records_all_held_out_say_so_and_name_the_option(tmp_path, capsys, embedded_path):
    """make-tasks on a held-out library, then train: the error says why and what to pass."""
    from sweworld.data.store import RecordStore, finalize

    from .conftest import HELDOUT_REPO, make_swt_record

    with RecordStore(tmp_path / "d") as store:
        for i in range(3):
            store.add(make_swt_record(i, HELDOUT_REPO))
    finalize(tmp_path / "d")
    argv = ["swt", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "a"), *FAST]
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert "all 3 swt records are in the test split" in err
    assert f"held-out repositories: {HELDOUT_REPO}" in err and "--split train" in err
    assert not (tmp_path / "a").exists()


def test_examples_left_out_are_counted_and_said(tiny_data, tmp_path, capsys, embedded_path):
    argv = ["swt", "--data", str(tiny_data), "--out", str(tmp_path / "a"), *FAST,
            "--max-length", "64"]  # fmt: skip
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    assert "swt train: 8 records -> 0 examples" in err
    assert "left out: 8 longer than max_length (raise --max-length)" in err
    assert "swt test (evaluation): 2 records -> 0 examples" in err
    assert "all 8 train records were left out (8 longer than max_length)" in err
