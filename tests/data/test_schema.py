"""The record schema: columns, features, splits by repository, command kinds."""

from __future__ import annotations

import json

import pytest

from sweworld.data.schema import (
    DEFAULT_HELDOUT_REPOS,
    SCHEMA_VERSION,
    SWRRecord,
    SWTRecord,
    command_kind,
    features,
    parse_meta,
    record_from_dict,
    record_id,
    split_of,
)


def _swt(**kw) -> SWTRecord:
    base = dict(
        id="a", source="t", instance_id="i", repo="django/django", command="python x.py",
        stdout="out", stderr="", exit_code=0,
    )  # fmt: skip
    base.update(kw)
    return SWTRecord(**base)


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("cd /testbed && python -m pytest tests/test_a.py -q", "pytest"),
        ("pytest -x", "pytest"),
        ("python tests/runtests.py admin_views", "pytest"),
        ("python -m unittest discover", "unittest"),
        ("python reproduce.py", "python_script"),
        ("/usr/bin/python3 -c 'print(1)'", "python_c"),
        ("python -m pip list", "python_module"),
        ("python - <<EOF\nprint(1)\nEOF", "python_script"),
        ("ls -la", "other"),
        ("", "other"),
    ],
)
def test_command_kind(command, kind):
    assert command_kind(command) == kind


def test_features_cover_every_column_with_its_type():
    swt = features("swt")
    assert set(swt) == set(_swt().to_dict())
    assert swt["exit_code"].dtype == "int64"
    assert swt["consistent"].dtype == "bool"
    assert swt["stdout"].dtype == "string"
    swr = features("swr")
    assert swr["resolved"].dtype == "bool"
    with pytest.raises(KeyError):
        features("other")


def test_record_round_trip_ignores_unknown_columns():
    rec = _swt(test_statuses=json.dumps({"t::a": "PASSED"}))
    row = {**rec.to_dict(), "added_by_a_later_version": 1}
    back = record_from_dict("swt", row)
    assert back == rec
    assert back.statuses() == {"t::a": "PASSED"}
    assert back.schema_version == SCHEMA_VERSION
    swr = SWRRecord(id="b", source="t", instance_id="i", repo="r/r", patch="", resolved=True)
    assert record_from_dict("swr", swr.to_dict()) == swr


def test_stored_context_comes_back_as_the_same_context():
    from sweworld.transition.context import SWTContext

    ctx = SWTContext(command="python x.py", problem="p", mode="oracle", truncated={"diff": 3})
    rec = _swt(context_oracle=json.dumps(ctx.to_dict()))
    assert rec.context("oracle") == ctx
    assert rec.context("blind") is None


def test_split_is_by_repository_never_by_row():
    assert split_of("psf/requests") == "test"
    assert split_of("django/django") == "train"
    assert split_of("django/django", heldout=["django/django"]) == "test"
    # at least a quarter of the shared SWE-bench repositories, plus a factory library
    shared = {r for r in DEFAULT_HELDOUT_REPOS if not r.startswith("pypi/")}
    assert len(shared) >= 8 / 4
    assert any(r.startswith("pypi/") for r in DEFAULT_HELDOUT_REPOS)


def test_record_ids_are_stable_and_distinguish_their_parts():
    assert record_id("a", 1, "x") == record_id("a", 1, "x")
    assert record_id("a", 1, "x") != record_id("a", 1, "y")
    assert len(record_id("a")) == 24


def test_parse_meta_reads_an_object_and_nothing_else() -> None:
    """Every reader of a record's meta (divergence, the factory's reproductions, the
    outcome trainer, the data report) reads it here: a torn or foreign value is no meta."""
    assert parse_meta('{"phase": "wrong", "wrong": 1}') == {"phase": "wrong", "wrong": 1}
    for bad in ("", None, "{torn", '["x"]', "3", b"\xff"):
        assert parse_meta(bad) == {}
    given = {"state": "diverged"}
    copy = parse_meta(given)
    copy["state"] = "kept"
    assert copy == {"state": "kept"} and given == {"state": "diverged"}  # a new dict
