"""One command line (issue 22): every option of every sub-command has help, no help shows
Sphinx markup, one name per concept (old names are hidden aliases), one ``--mode`` default."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from sweworld.cli import build_parser

#: Options accepted under an earlier name but not listed (``help=SUPPRESS``).
HIDDEN_ALIASES = {"--file": "--tasks", "--output": "--out"}

SPHINX = re.compile(r":(?:mod|func|class|data|meth|attr|obj|exc):`|``")


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("sweworld",)
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree, with its command line (``sweworld data make-tasks``)."""
    yield " ".join(path), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from walk(child, (*path, name))


def options(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            yield action


PARSERS = dict(walk(build_parser()))


def test_the_tree_has_every_command() -> None:
    for command in ("tasks list", "episode", "reward", "verify", "data make-tasks", "train swt"):
        assert f"sweworld {command}" in PARSERS
    assert len(PARSERS) > 30


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_every_option_has_help_without_markup(command: str) -> None:
    parser = PARSERS[command]
    parser.format_help()  # renders (a bad %-format in a help string raises here)
    problems = []
    for action in options(parser):
        name = action.option_strings[0] if action.option_strings else action.dest
        if action.help is argparse.SUPPRESS:
            if name not in HIDDEN_ALIASES:
                problems.append(f"{name}: hidden, but not a known alias")
            continue
        if not action.help or not action.help.strip():
            problems.append(f"{name}: no help")
        elif SPHINX.search(action.help):
            problems.append(f"{name}: Sphinx markup in its help")
        if action.option_strings and action.nargs == "?" and action.const in (True, False):
            problems.append(f"{name}: a boolean taking an optional value (use --x / --no-x)")
    if parser.description and SPHINX.search(parser.description):
        problems.append("Sphinx markup in the description")
    assert not problems, f"{command}: {problems}"


def test_hidden_aliases_are_the_same_option_as_the_listed_name() -> None:
    for command, parser in PARSERS.items():
        by_flag = {flag: a for a in options(parser) for flag in a.option_strings}
        for alias, name in HIDDEN_ALIASES.items():
            if alias in by_flag and by_flag[alias].help is argparse.SUPPRESS:
                assert name in by_flag, f"{command}: {alias} hidden but {name} missing"
                assert by_flag[alias].dest == by_flag[name].dest, command


def test_the_task_file_is_tasks_and_file_still_works() -> None:
    parser = build_parser()
    for flag in ("--tasks", "--file"):
        args = parser.parse_args(["tasks", "show", flag, "rows.jsonl", "--id", "x"])
        assert args.file == "rows.jsonl"
        args = parser.parse_args(["episode", flag, "rows.jsonl", "--id", "x", "--actions", "a"])
        assert args.file == "rows.jsonl"
    shown = PARSERS["sweworld episode"].format_help()
    assert "--tasks" in shown and "--file" not in shown


def test_one_mode_default_oracle() -> None:
    """Every ``--mode`` choosing between what the world may read has one default, oracle (the
    world and the reward read the task's reference, as a real environment's hidden tests);
    ``train --mode`` chooses the training contexts (``both``) and differs."""
    seen = []
    for command, parser in PARSERS.items():
        for action in options(parser):
            if "--mode" not in action.option_strings or not action.choices:
                continue
            if set(action.choices) == {"blind", "oracle"}:
                seen.append(command)
                assert action.default == "oracle", f"{command} --mode defaults to {action.default}"
    for command in ("reward", "verify", "calibrate", "simulate", "episode", "run", "shell"):
        assert f"sweworld {command}" in seen


def test_reward_help_says_what_the_score_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reward", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "`score` is the probability that the patch resolves the task, P(resolved)" in out
