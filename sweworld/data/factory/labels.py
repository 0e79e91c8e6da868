"""Real SWR labels for a factory task's candidate patches: right, partial and wrong.

Candidates (:func:`candidates`): the gold patch (``right``), a fix of one of two bugs
(``partial``, multi-bug tasks only), another edit of the buggy code (``wrong``: a second
mutation near the bug), the empty patch (``empty``) and an edit of the failing test
instead of the code (``test_edit``). Each is labelled by the real reward
(:func:`sweworld.reward.real.real_reward`, ``label_source="real-run"``, the real
``tests_status``); the gold and empty candidates reuse the task's verification runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sweworld.data.factory.mutate import Mutation
from sweworld.data.factory.tasks import apply_all, mutant_texts
from sweworld.data.schema import SWRRecord, record_id, to_json
from sweworld.tasks.unified_diff import make_unified_diff

__all__ = ["candidates", "label_records", "test_edit_patch"]


def test_edit_patch(test_source: str, test_path: str, test_id: str) -> str:
    """A patch that disables the failing test (renames its function) instead of fixing
    the code: a wrong fix an agent sometimes submits."""
    name = test_id.split("::")[-1].split("[", 1)[0]
    pattern = re.compile(rf"^(\s*(?:async\s+)?def\s+){re.escape(name)}\b", re.MULTILINE)
    edited, count = pattern.subn(rf"\g<1>disabled_{name}", test_source, count=1)
    return make_unified_diff(test_path, test_source, edited) if count else ""


test_edit_patch.__test__ = False  # type: ignore[attr-defined]


def candidates(
    task: Any,
    *,
    originals: Mapping[str, str],
    bugs: Sequence[Mutation],
    wrong: Mutation | None,
    test_source: str,
) -> list[tuple[str, str]]:
    """``(kind, patch)`` candidates for ``task`` (patches against the buggy state)."""
    buggy = mutant_texts(originals, bugs)
    out: list[tuple[str, str]] = [("right", task.patch), ("empty", "")]
    if len(bugs) >= 2:  # fix the first bug only
        still = mutant_texts(originals, bugs[1:])
        partial = "".join(
            make_unified_diff(p, buggy[p], still.get(p, originals[p])) for p in sorted(buggy)
        )
        out.append(("partial", partial))
    if wrong is not None and wrong.path in buggy:
        same_file = [m for m in bugs if m.path == wrong.path]  # offsets of the base text
        wrong_text = apply_all(originals[wrong.path], [*same_file, wrong])
        out.append(("wrong", make_unified_diff(wrong.path, buggy[wrong.path], wrong_text)))
    test_id = task.FAIL_TO_PASS[0]
    test_path = test_id.split("::", 1)[0]
    edit = test_edit_patch(test_source, test_path, test_id)
    if edit:
        out.append(("test_edit", edit))
    return [(kind, patch) for kind, patch in out if patch or kind == "empty"]


def label_records(
    task: Any,
    cands: Sequence[tuple[str, str]],
    *,
    manager: Any,
    executor: Any,
    known: Mapping[str, Any],
    timeout: float = 600.0,
    skip: Callable[[str, str], None] | None = None,
) -> list[SWRRecord]:
    """One :class:`SWRRecord` per candidate, labelled by a real run (``known``: results
    already run, by kind, reused). A candidate whose run did not run the tests (timeout,
    environment or executor failure) is no label: ``skip(kind, reason)`` is told why."""
    from sweworld.reward.real import real_reward

    records = []
    row = to_json(task.to_row())
    for kind, patch in cands:
        result = known.get(kind)
        if result is None:
            result = real_reward(task, patch, manager=manager, executor=executor, timeout=timeout)
        entry = result.report.get(task.instance_id, {})
        if result.status not in ("ok", "patch_failed"):  # not a label: the run failed
            if skip is not None:
                reason = result.info.get("reason") or result.info.get("error") or ""
                skip(kind, f"{result.status}: {reason}".rstrip(": "))
            continue
        records.append(
            SWRRecord(
                id=record_id("factory", task.instance_id, kind, patch),
                source="factory",
                instance_id=task.instance_id,
                repo=task.repo,
                base_commit=task.base_commit,
                task=row,
                patch=patch,
                resolved=bool(result.resolved),
                tests_status=json.dumps(entry.get("tests_status", {}), sort_keys=True),
                label_source="real-run",
                candidate_kind=kind,
                meta=to_json({"status": result.status}),
            )
        )
    return records
