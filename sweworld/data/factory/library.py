"""What the factory reads of a library before mutating it: its modules' texts (non-UTF-8
files skipped with a reason), its top-level import names, the test files that import a
module, and the first mutations whose mutant parses. Used by
:mod:`sweworld.data.factory.pipeline`, which re-exports it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from sweworld.data.factory import mutate, transitions
from sweworld.data.store import RecordStore

__all__ = ["first_parsing", "read_sources", "relevant_test_files"]


def relevant_test_files(module_path: str, tests: dict[str, str]) -> list[str]:
    """The test files that import the module at ``module_path`` (by its dotted name or
    its last component in an import line); all test files when none does."""
    dotted = transitions.module_name(module_path)
    last = dotted.rsplit(".", 1)[-1]
    found = []
    for path, text in tests.items():
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith(("import ", "from ")):
                continue
            words = line.replace(",", " ").replace(".", " ").split()
            if dotted in line or last in words:
                found.append(path)
                break
    return sorted(found) or sorted(tests)


def read_sources(
    root: Path, paths: Iterable[str], store: RecordStore, counts: Counter
) -> dict[str, str]:
    """The texts of ``paths`` under ``root``; a file that is not UTF-8 text (a Latin-1
    module, a binary named ``.py``) is left out, with a skip reason (``file_not_utf8``,
    ``file_unreadable``): one file never stops the run."""
    texts = {}
    for path in paths:
        try:
            texts[path] = (root / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            reason = "file_not_utf8" if isinstance(exc, UnicodeDecodeError) else "file_unreadable"
            store.skip(f"file:{path}", reason, detail=f"{type(exc).__name__}: {exc}")
            counts[f"files_skipped_{reason.removeprefix('file_')}"] += 1
    return texts


def first_parsing(
    ordered: Iterable[mutate.Mutation], originals: dict[str, str], limit: int
) -> list[mutate.Mutation]:
    """The first ``limit`` mutations of ``ordered`` whose mutant parses (only those are
    parsed: checking every mutation of a library is quadratic in its files' sizes)."""
    chosen: list[mutate.Mutation] = []
    for m in ordered:
        if len(chosen) >= limit:
            break
        if mutate.parses(originals[m.path], m):
            chosen.append(m)
    return chosen
