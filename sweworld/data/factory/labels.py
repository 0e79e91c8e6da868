"""Real SWR labels for a factory task's candidate patches: right, partial and wrong.

Candidates (:func:`candidates`): the gold patch (``right``), the gold fix written
otherwise (``alt``: one equivalent rewrite of the fixed code, :mod:`.rewrite`), a fix of
one of two bugs (``partial``, multi-bug tasks only), other edits of the buggy code
(``wrong``: several wrong fixes, in the bug's function first, :func:`wrong_mutations`),
the gold fix plus one of those edits (``overreach``: it holds the whole right change, and
resolves only when the extra edit breaks nothing), the empty patch (``empty``) and an
edit of the failing test instead of the code (``test_edit``). Each is
labelled by the real reward (:func:`sweworld.reward.real.real_reward`,
``label_source="real-run"``, the real ``tests_status``); the gold and empty candidates
reuse the task's verification runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sweworld.data.factory.mutate import Mutation, parses
from sweworld.data.factory.tasks import Screened, apply_all, mutant_texts
from sweworld.data.schema import SWRRecord, record_id, to_json
from sweworld.reward.real import GRADED_STATUSES
from sweworld.tasks.unified_diff import make_unified_diff

__all__ = ["candidates", "label_records", "test_edit_patch", "wrong_mutations"]


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
    wrong: Mutation | Sequence[Mutation] | None,
    test_source: str,
    alternatives: Sequence[Sequence[Mutation]] = (),
    overreach: int = 0,
) -> list[tuple[str, str]]:
    """``(kind, patch)`` candidates for ``task`` (patches against the buggy state); one
    ``wrong`` candidate per wrong mutation given (each a different edit of the bug's file,
    none undoing the bug); one ``alt`` per rewrite group in ``alternatives`` (spans of the
    base text); ``overreach`` candidates from the first wrong mutations."""
    buggy = mutant_texts(originals, bugs)

    def fixed_plus(extra: Sequence[Mutation]) -> str:  # the gold state with ``extra`` applied
        texts = mutant_texts(originals, extra)
        return "".join(
            make_unified_diff(p, buggy.get(p, originals[p]), texts.get(p, originals[p]))
            for p in sorted({*buggy, *texts})
        )

    out: list[tuple[str, str]] = [("right", task.patch), ("empty", "")]
    out.extend(("alt", fixed_plus(group)) for group in alternatives if group)
    if len(bugs) >= 2:  # fix the first bug only
        still = mutant_texts(originals, bugs[1:])
        partial = "".join(
            make_unified_diff(p, buggy[p], still.get(p, originals[p])) for p in sorted(buggy)
        )
        out.append(("partial", partial))
    wrongs = [wrong] if isinstance(wrong, Mutation) else list(wrong or ())
    for w in wrongs:
        if w.path not in buggy:
            continue
        same_file = [m for m in bugs if m.path == w.path]  # offsets of the base text
        wrong_text = apply_all(originals[w.path], [*same_file, w])
        out.append(("wrong", make_unified_diff(w.path, buggy[w.path], wrong_text)))
    # the last-ranked wrong fixes first: the first ones are often edits screening showed to
    # break no test, and the gold fix plus one of them resolves for certain
    out.extend(("overreach", fixed_plus([w])) for w in wrongs[::-1][: max(0, overreach)])
    test_id = task.FAIL_TO_PASS[0]
    test_path = test_id.split("::", 1)[0]
    edit = test_edit_patch(test_source, test_path, test_id)
    if edit:
        out.append(("test_edit", edit))
    kept: list[tuple[str, str]] = []
    for kind, patch in out:  # no empty non-empty candidate, no patch twice
        if (patch or kind == "empty") and all(patch != p for _, p in kept):
            kept.append((kind, patch))
    return kept


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
        if result.status not in (*GRADED_STATUSES, "patch_failed"):  # not a label: the run failed
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


def wrong_mutations(
    bugs: list[Mutation],
    rejected: list[Screened],
    limit: int = 3,
    unscreened: Iterable[Mutation] = (),
    originals: dict[str, str] | None = None,
) -> list[Mutation]:
    """Up to ``limit`` edits of the bug's file that do not overlap the bugs, each a wrong
    fix (a negative that looks like a fix). Ranked: in the bug's function first; there, a
    rejected mutant that broke no test (a plausible, subtle edit), then an unscreened
    mutation of that function (``unscreened``, kept only when it parses in ``originals``),
    then other rejected mutants; nearest first; one per span, so the fixes differ."""
    spans = [(m.start, m.end) for m in bugs]
    bug = bugs[0]
    ranked: list[tuple[tuple[Any, ...], Mutation]] = []
    seen: set[str] = set()

    def consider(m: Mutation, tier: int) -> None:
        if m.key in seen or m.path != bug.path:
            return
        if any(m.start < e and s < m.end for s, e in spans):
            return
        seen.add(m.key)
        ranked.append(((m.function != bug.function, tier, abs(m.start - bug.start), m.key), m))

    for item in rejected:
        consider(item.mutations[0], 0 if item.verdict == "no_test_broken" else 2)
    for m in unscreened:
        same = m.function == bug.function and m.function and m.key not in seen
        if same and (originals is None or parses(originals[m.path], m)):
            consider(m, 1)
    ranked.sort(key=lambda pair: pair[0])
    chosen: list[Mutation] = []
    for _, m in ranked:
        if len(chosen) >= limit:
            break
        if any(m.start < c.end and c.start < m.end for c in chosen):
            continue  # two wrong fixes of one span are one wrong fix
        chosen.append(m)
    return chosen
