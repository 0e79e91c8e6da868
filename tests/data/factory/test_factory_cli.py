"""make-tasks says what is held out and where the records went; --split / --heldout change
it; a --name that another repository answers to is refused before any test runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweworld.data.factory import source
from sweworld.data.factory.cli import split_report
from sweworld.data.importing import heldout_repos
from sweworld.data.schema import DEFAULT_HELDOUT_REPOS, split_heldout


def test_split_moves_only_this_library() -> None:
    assert split_heldout(None) == DEFAULT_HELDOUT_REPOS
    assert "pypi/inflection" not in split_heldout(None, "train", "pypi/inflection")
    assert "psf/requests" in split_heldout(None, "train", "pypi/inflection")
    assert split_heldout((), "test", "local/lib") == ("local/lib",)
    assert split_heldout(("a/b",), "auto", "local/lib") == ("a/b",)
    with pytest.raises(ValueError, match="split"):
        split_heldout(None, "valid", "a/b")


def test_heldout_none_holds_out_nothing() -> None:
    assert heldout_repos("none") == ()
    assert heldout_repos(None) == DEFAULT_HELDOUT_REPOS
    assert heldout_repos("a/b, c/d") == ("a/b", "c/d")


def test_report_names_the_heldout_library_and_the_option() -> None:
    summary = {
        "heldout_repos": ["pypi/inflection", "psf/requests"],
        "factory": {"library": "pypi/inflection"},
        "swt": {"splits": {"train": 0, "test": 42}},
        "swr": {"splits": {"train": 0, "test": 7}},
    }
    lines = split_report(summary)
    assert lines[0] == "held out (test split): pypi/inflection, psf/requests"
    assert "swt: 0 train, 42 test" in lines[1] and "swr: 0 train, 7 test" in lines[2]
    assert "--split train" in lines[3] and "--heldout none" in lines[3]
    summary["heldout_repos"] = []
    summary["swt"]["splits"] = {"train": 42, "test": 0}
    lines = split_report(summary)
    assert lines[0] == "held out (test split): no repository" and len(lines) == 3


def test_a_name_taken_by_another_repository_is_refused(tmp_path: Path) -> None:
    lib = source.LibrarySource(
        repo="sweworld/stockroom",  # the toy repository answers to this name first
        bare=tmp_path / "repos" / "sweworld__stockroom.git",
        commit="0" * 40,
        checkout=tmp_path,
    )
    with pytest.raises(source.FactorySourceError, match=r"already taken.*choose another --name"):
        source.check_name_resolves(lib)


def test_the_library_own_repository_is_accepted(tmp_path: Path, monkeypatch) -> None:
    bare = tmp_path / "repos" / "local__minilib.git"
    (bare / "objects").mkdir(parents=True)
    (bare / "HEAD").write_text("ref: refs/heads/main\n")
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(tmp_path / "repos"))
    lib = source.LibrarySource(repo="local/minilib", bare=bare, commit="0" * 40, checkout=tmp_path)
    source.check_name_resolves(lib)  # no error
