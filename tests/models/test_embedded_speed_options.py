"""Speed options of the in-process backend: the JSON-end watch, prompt reuse across calls,
int8 quantization (after the LoRA adapter is merged); each checked against plain decoding
with the embedded model's real weights."""

from __future__ import annotations

import time

import pytest

from sweworld.models import GenerationRequest
from sweworld.models.fast_decode import JSONEndWatch


def fed(prefix: str, *pieces: str) -> JSONEndWatch:
    watch = JSONEndWatch(prefix)
    for piece in pieces:
        watch.feed(piece)
    return watch


# ---------------------------------------------------------------- the watch, alone


def test_watch_ends_when_the_object_closes():
    watch = JSONEndWatch('{"stdout": "')
    assert not watch.feed("1 passed")
    assert not watch.feed('", "stderr": "", "exit_code": 0')
    assert watch.feed("}\n\nMore text")
    assert watch.done and not watch.off


def test_watch_reads_strings_and_escapes():
    # braces, brackets and escaped quotes inside strings do not count
    watch = fed('{"stdout": "', 'a } ] { \\" \\\\', '", "x": [1, {"y": "}"}]')
    assert not watch.done and not watch.off
    assert watch.feed(', "exit_code": 1}')
    # a backslash escaping the next piece's quote
    assert not fed('{"a": "x\\', '"', "}").done
    assert fed('{"a": "x\\', '"', '"}').done


def test_watch_off_for_other_answers():
    assert fed("", "  \n", '{"a": 1}').done  # leading blanks are fine
    for answer in ("The output is {}", "[1, 2]", '"{}"'):
        watch = fed("", answer)
        assert watch.off and not watch.done
        assert not watch.feed('{"a": 1}')  # stays off
    # an object that does not read (an unescaped quote) turns the watch off
    watch = fed('{"stdout": "', 'he said "hi""}')
    assert watch.off and not watch.done
    assert not watch.feed('", "exit_code": 0}')


def test_watch_is_linear():
    piece = '"ab\\"c", {"k": [1, 2]}, '
    started = time.perf_counter()
    watch = JSONEndWatch('{"stdout": [')
    for _ in range(40_000):
        watch.feed(piece)
    assert watch.feed("0]}")
    assert time.perf_counter() - started < 5.0


# ---------------------------------------------------------------- with the real model

SWT_SYSTEM = (
    "You predict what a command prints. Answer with one JSON object "
    '{"stdout": ..., "stderr": ..., "exit_code": ...}.'
)


def swt_request(command: str, max_tokens: int = 64) -> GenerationRequest:
    return GenerationRequest(
        [
            {"role": "system", "content": SWT_SYSTEM},
            {"role": "user", "content": f"Repository: stockroom\nCommand: {command}"},
            {"role": "assistant", "content": '{"stdout": "'},
        ],
        max_tokens=max_tokens,
    )


COMMANDS = ("python -c 'print(1 + 1)'", "python --version", "python -m pytest -q tests")


@pytest.fixture(scope="module")
def plain(embedded_path):
    from sweworld.models import TransformersLM

    lm = TransformersLM(embedded_path, json_stop=False, prefix_cache=False)
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def plain_texts(plain):
    return [plain.generate([swt_request(c)])[0][0].text for c in COMMANDS]


@pytest.mark.slow
def test_json_stop_is_a_prefix_of_plain_decoding(embedded_path, plain_texts):
    from sweworld.models import TransformersLM

    lm = TransformersLM(embedded_path, prefix_cache=False)  # json_stop is the default
    assert lm.json_stop
    stopped = 0
    for command, full in zip(COMMANDS, plain_texts, strict=True):
        gen = lm.generate([swt_request(command)])[0][0]
        assert full.startswith(gen.text)
        if gen.info.get("stop_string") == "<json end>":
            stopped += 1
            assert gen.finish_reason == "stop"
            assert gen.text.rstrip().endswith("}")
    assert stopped >= 1  # the watch does stop real answers
    lm.close()


@pytest.mark.slow
def test_prompt_reuse_gives_the_same_answers(embedded_path, plain_texts):
    from sweworld.models import TransformersLM

    lm = TransformersLM(embedded_path, json_stop=False)  # prefix_cache is the default
    reused = []
    for command, full in zip(COMMANDS, plain_texts, strict=True):
        gen = lm.generate([swt_request(command)])[0][0]
        reused.append(gen.info["prompt_tokens_reused"])
        assert gen.text == full
    assert reused[0] == 0 and all(n > 10 for n in reused[1:])  # the system prompt at least
    # the same prompt again: its whole cache is reused
    again = lm.generate([swt_request(COMMANDS[-1])])[0][0]
    assert again.text == plain_texts[-1]
    assert again.info["prompt_tokens_reused"] == again.prompt_tokens
    lm.close()


def test_int8_is_applied(embedded_path):
    from sweworld.models import TransformersLM

    lm = TransformersLM(embedded_path, quantize="int8", prefix_cache=False)
    import torch

    quantized = [m for m in lm.model.modules() if "quantized" in type(m).__module__]
    assert quantized and not any(type(m) is torch.nn.Linear for m in lm.model.modules())
    gen = lm.generate([swt_request(COMMANDS[0], max_tokens=4)])[0][0]
    assert gen.info["quantize"] == "int8" and gen.completion_tokens >= 1
    lm.close()
    # int8 is an option, not the default: it changed greedy answers and decoded slower here
    default = TransformersLM(embedded_path)
    assert default.quantize is None
    default.close()


@pytest.mark.slow
def test_int8_quantizes_after_the_adapter_is_merged(embedded_path, lora_adapter):
    from sweworld.models import TransformersLM

    request = swt_request(COMMANDS[0], max_tokens=16)
    base = TransformersLM(embedded_path, quantize="int8")
    tuned = TransformersLM(embedded_path, adapter=lora_adapter, quantize="int8")
    assert not hasattr(tuned.model, "peft_config")  # merged, then quantized
    assert not any("lora" in name for name, _ in tuned.model.named_modules())
    text = tuned.generate([request])[0][0].text
    assert text != base.generate([request])[0][0].text  # the adapter still counts
    assert tuned.generate([request])[0][0].info["quantize"] == "int8"
    for lm in (base, tuned):
        lm.close()
    with pytest.raises(ValueError, match="merged"):
        TransformersLM(embedded_path, adapter=lora_adapter, quantize="int8", merge_adapter=False)
    with pytest.raises(ValueError, match="quantize"):
        TransformersLM(embedded_path, quantize="int4")


@pytest.fixture(scope="module")
def lora_adapter(embedded_path, tmp_path_factory):
    """A tiny random LoRA adapter for the embedded model, with non-zero B weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(str(embedded_path), local_files_only=True)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=4, lora_alpha=16, target_modules=targets, lora_dropout=0.0)
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    out = tmp_path_factory.mktemp("lora") / "tiny-lora"
    model.save_pretrained(str(out))
    return out
