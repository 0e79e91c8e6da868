"""EpisodeConfig: defaults, validation, dict round trips."""

from __future__ import annotations

import pytest

from sweworld.env.config import (
    END_REASONS,
    PROMPT_FORMATS,
    REWARD_SOURCES,
    TERMINATED_REASONS,
    TRUNCATED_REASONS,
    EpisodeConfig,
)
from sweworld.sandbox.executor import NoExecutor


def test_defaults_run_on_a_cpu():
    cfg = EpisodeConfig()
    assert (cfg.executor, cfg.model, cfg.reward, cfg.mode) == (
        "outcome",
        "embedded",
        "swr",
        "oracle",
    )
    assert cfg.prompt_format in PROMPT_FORMATS and cfg.reward in REWARD_SOURCES
    assert cfg.max_steps == 50 and cfg.dense is False and cfg.score_unsubmitted is True


def test_end_reasons_split_into_terminated_and_truncated():
    assert set(TERMINATED_REASONS) == {"submitted", "error"}
    assert set(TRUNCATED_REASONS) == {"max_steps", "timeout", "max_tokens"}
    assert set(END_REASONS) == set(TERMINATED_REASONS) | set(TRUNCATED_REASONS)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_steps", 0),
        ("max_steps", 2.5),
        ("max_wall_s", 0),
        ("step_timeout_s", -1),
        ("max_observation_chars", 100),
        ("max_action_chars", 10),
        ("max_tokens", 0),
        ("prompt_format", "chatml"),
        ("action_format", "json"),
        ("observation_format", "xml"),
        ("mode", "peek"),
        ("reward", "oracle"),
        ("reward_preset", "generous"),
    ],
)
def test_bad_values_are_refused_by_name(option, value):
    with pytest.raises(ValueError, match=option):
        EpisodeConfig(**{option: value})


def test_from_dict_refuses_unknown_keys_and_replace_validates():
    with pytest.raises(ValueError, match="max_step"):
        EpisodeConfig.from_dict({"max_step": 3})
    cfg = EpisodeConfig.from_dict({"max_steps": 3, "swr_stages": ["syntax", "semantic"]})
    assert cfg.max_steps == 3 and cfg.swr_stages == ("syntax", "semantic")
    assert cfg.replace(dense=True).dense is True and cfg.dense is False  # a copy
    with pytest.raises(ValueError, match="max_steps"):
        cfg.replace(max_steps=-1)


def test_to_dict_round_trips_and_names_an_executor_object():
    cfg = EpisodeConfig(max_steps=7, swr_stages=("syntax",), extra={"k": 1})
    data = cfg.to_dict()
    assert data["swr_stages"] == ["syntax"] and data["extra"] == {"k": 1}
    assert EpisodeConfig.from_dict(data) == cfg
    assert EpisodeConfig(executor=NoExecutor()).to_dict()["executor"] == "none"
