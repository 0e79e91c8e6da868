"""The command lines' number types: refused by the parser with one line, never mid-run."""

import argparse
import math

import pytest

from sweworld.argtypes import at_least, bounded


def test_numbers_in_range_are_returned_as_their_kind():
    assert bounded(int, 0, 65535)("8765") == 8765
    assert bounded(float, 0.1, 3600)("0.1") == pytest.approx(0.1)
    assert at_least(0)("0") == 0
    assert isinstance(bounded(float, 0)("3"), float)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (at_least(1), "0", "must be at least 1, got 0"),
        (at_least(0), "-1", "must be at least 0, got -1"),
        (at_least(1), "two", "'two' is not an integer"),
        (at_least(1), "1.5", "'1.5' is not an integer"),
        (bounded(float, 0), "nan", "must be at least 0, got nan"),
        (bounded(float, 0), "inf", "must be at least 0, got inf"),
        (bounded(float, 0), "x", "'x' is not a number"),
        (bounded(int, 0, 65535), "65536", "65536 is out of range [0, 65535]"),
        (bounded(float, 0.1, 3600), "-inf", "-inf is out of range [0.1, 3600]"),
    ],
)
def test_bad_numbers_are_one_line_errors(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        parse(text)
    assert str(err.value) == message


def test_the_parser_refuses_them_before_anything_runs(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--workers", type=at_least(1))
    parser.add_argument("--l2", type=bounded(float, 0, math.inf))
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--workers", "0"])
    assert stop.value.code == 2
    assert "argument --workers: must be at least 1, got 0" in capsys.readouterr().err
    assert parser.parse_args(["--workers", "2", "--l2", "1e-3"]).l2 == pytest.approx(1e-3)
