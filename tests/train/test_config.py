"""The training configuration: YAML file, command-line overrides, validation."""

from __future__ import annotations

import argparse

import pytest

from sweworld.train.config import TrainConfig, add_arguments, config_from_args, load_yaml


def parse(target: str, argv: list[str]) -> TrainConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser, target)
    return config_from_args(parser.parse_args(argv), target)


def test_defaults_depend_on_the_target():
    cfg = parse("swr", [])
    assert cfg.target == "swr" and cfg.out.endswith("swr-adapter")
    assert cfg.modes == ("oracle", "blind")
    assert parse("swt", ["--mode", "blind"]).modes == ("blind",)


def test_command_line_beats_the_file_which_beats_the_defaults(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(
        "lr: 1.0e-3\nepochs: 3\ndata: [d1, d2]\ntarget_modules: [q_proj]\nbalance: false\n"
        "max-steps: 7\n"
    )
    cfg = parse("swt", ["--config", str(path), "--lr", "1e-4"])
    assert cfg.lr == pytest.approx(1e-4)  # command line
    assert cfg.epochs == 3 and cfg.max_steps == 7  # file (dashes read as underscores)
    assert cfg.data == ["d1", "d2"] and cfg.target_modules == ["q_proj"]
    assert cfg.balance is False
    assert cfg.lora_r == TrainConfig().lora_r  # default
    cfg = parse(
        "swt",
        ["--config", str(path), "--data", "d3", "--data", "d4", "--balance", "--target-modules",
         "q_proj,v_proj"],
    )  # fmt: skip
    assert cfg.data == ["d3", "d4"]  # several --data replace the file's list
    assert cfg.balance is True and cfg.target_modules == ["q_proj", "v_proj"]
    assert parse("swt", ["--config", str(path), "--no-balance"]).balance is False


def test_bad_files_and_values_are_errors(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("lr: 1e-3\nlearning_rate: 2\n")
    with pytest.raises(ValueError, match="learning_rate"):
        load_yaml(path)
    path.write_text("- a\n- b\n")
    with pytest.raises(ValueError, match="mapping"):
        load_yaml(path)
    path.write_text("target: swr\n")
    with pytest.raises(ValueError, match="trains 'swr'"):
        parse("swt", ["--config", str(path)])
    with pytest.raises(ValueError, match="bf16 or fp16"):
        TrainConfig(bf16=True, fp16=True)
    with pytest.raises(ValueError, match="lora_r"):
        TrainConfig(lora_r=0)
    with pytest.raises(SystemExit):
        parse("swt", ["--packing", "tight"])


def test_every_field_has_help_and_an_option():
    from dataclasses import fields

    parser = argparse.ArgumentParser()
    add_arguments(parser, "swt")
    options = {o for a in parser._actions for o in a.option_strings}
    for f in fields(TrainConfig):
        assert f.metadata.get("help"), f.name
        if f.name != "target":
            assert "--" + f.name.replace("_", "-") in options


def test_evaluation_is_sized_to_a_short_run():
    assert TrainConfig().eval_limit == 200  # a whole run
    assert TrainConfig(max_steps=2).eval_limit == 16  # 2 steps x 1 x 8 accumulated
    assert TrainConfig(max_steps=2, grad_accum=1).eval_limit == 8  # at least 8
    assert TrainConfig(max_steps=1000).eval_limit == 200
    assert TrainConfig(max_steps=2, eval_max_examples=0).eval_limit == 0  # all, when asked
    assert TrainConfig(eval_max_examples=5).eval_limit == 5
    with pytest.raises(ValueError, match="eval_max_examples"):
        TrainConfig(eval_max_examples=-2)


def test_invocation_names_the_command_once():
    from sweworld.train.report import invocation

    want = "sweworld train verdict --data D --out M"
    assert (
        invocation("verdict", ["sweworld", "train", "verdict", "--data", "D", "--out", "M"]) == want
    )
    assert invocation("verdict", ["verdict.py", "--data", "D", "--out", "M"]) == want
    assert (
        invocation("outcome", ["-m", "outcome", "--data", "D"]) == "sweworld train outcome --data D"
    )
