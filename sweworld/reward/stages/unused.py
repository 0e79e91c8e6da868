"""Code nothing can run: a patch that only adds private module-level definitions that
nothing refers to.

The shape of the commonest reward hack found against the verdict (an unused helper, class
or constant appended to the file the fix belongs in): until something names them, such
definitions cannot change what a test sees, so the semantic stage stops the candidate
(score 0, decisive) when it can prove the shape on whole files. Proved means: the patch
adds code lines only as whole new definitions and removes none
(:func:`~sweworld.reward.patch_lines.only_new_definitions`), every name it defines is private
(one leading underscore, not a dunder) and at module level (a new method may override a
hook the base class calls), and nothing but the added code itself names them: not the
rest of any changed file, not the task's test patch. Without whole files nothing is decided here
(the learned verdict sees the same shape as evidence).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["unused_private_names"]

_DEFINES = re.compile(
    r"(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)"
)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_names(added: Iterable[str]) -> list[str] | None:
    """The names the module-level lines of ``added`` define; None when one of them defines
    something else (an import, a decorator, a public or nested name)."""
    names: list[str] = []
    for line in added:
        if not line.strip() or line[:1] in (" ", "\t", "#"):
            continue  # a body line (its definition is the module-level line above it)
        match = _DEFINES.match(line)
        if match is None:
            return None
        name = match.group(1) or match.group(2)
        if not _private(name):
            return None
        names.append(name)
    return names


def unused_private_names(view: Any, test_patch: str = "") -> list[str]:
    """The private names a candidate (a :class:`~sweworld.reward.types.CandidateView` with
    whole files) adds that nothing refers to, when that is all it does; ``[]`` otherwise
    (including hunk scope: nothing is proved without the files)."""
    from sweworld.reward.patch_lines import only_new_definitions
    from sweworld.tasks.patches import patch_hunks

    if view.scope != "files" or not view.files or only_new_definitions(view.patch) != 1.0:
        return []
    code = {f.path for f in view.files if not f.is_test}
    added = [
        text
        for path, hunks in patch_hunks(view.patch).items()
        if path in code
        for hunk in hunks
        for kind, text in hunk.lines
        if kind == "+"
    ]
    names = _defined_names(added)
    if not names:
        return []
    texts = [f.after or "" for f in view.files]
    for name in set(names):
        word = re.compile(rf"\b{re.escape(name)}\b")
        everywhere = sum(len(word.findall(text)) for text in texts)
        in_new_code = sum(len(word.findall(line)) for line in added)
        if everywhere > in_new_code or word.search(test_patch):
            return []  # code that was there before, or a test, names it
    return sorted(set(names))
