"""Equivalent rewrites for the factory's alternative right fixes (``alt``) and the
``overreach`` candidate (the gold fix plus a wrong edit)."""

from __future__ import annotations

import subprocess
import sys

from sweworld.data.factory.labels import candidates, wrong_mutations
from sweworld.data.factory.mutate import mutations
from sweworld.data.factory.rewrite import choose, rewrites
from sweworld.data.factory.tasks import apply_all, mutant_texts
from sweworld.tasks.patches import apply_hunks, patch_hunks
from sweworld.tasks.schema import Task

PATH = "lib/core.py"
LIB = (
    "import os\n"
    "\n"
    "\n"
    "def area(w, h=1):\n"
    "    size = w * h\n"
    "    if size < 10:\n"
    "        return size + 0\n"
    "    parts = [i for i in range(size)]\n"
    "    return len(parts)\n"
    "\n"
    "\n"
    "def scoped(x):\n"
    "    total = x\n"
    "\n"
    "    class Box:\n"
    "        total = 3\n"
    "\n"
    "    def inner():\n"
    "        return total + 1\n"
    "\n"
    "    return inner() == (x or 2), Box\n"
    "\n"
    "\n"
    "def reflective(y):\n"
    "    z = y\n"
    "    return locals()['z']\n"
)

PROBE = (
    "from core import area, scoped, reflective\n"
    "print([area(w, h) for w in range(-2, 6) for h in range(0, 4)])\n"
    "print(scoped(0)[0], scoped(3)[0], scoped(5)[1].total, reflective(4))\n"
)


def _run(tmp_path, text: str) -> str:
    (tmp_path / "core.py").write_text(text)
    (tmp_path / "probe.py").write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_rewrite_parses_and_keeps_the_module_behaviour(tmp_path):
    found = rewrites(LIB, PATH)
    kinds = {group[0].operator for group in found}
    assert kinds == {"mirror_compare", "temp_return", "rename_local"}
    expected = _run(tmp_path, LIB)
    for group in found:
        text = apply_all(LIB, group)
        assert text != LIB
        assert _run(tmp_path, text) == expected, group


def test_renames_leave_alone_what_a_rename_would_break():
    renamed = {
        (group[0].function, group[0].original)
        for group in rewrites(LIB, PATH)
        if group[0].operator == "rename_local"
    }
    assert ("area", "size") in renamed and ("area", "parts") in renamed
    assert ("scoped", "total") not in renamed  # a nested class binds the same name
    assert not any(func == "reflective" for func, _ in renamed)  # reads locals()
    assert not any(original in {"w", "h", "x", "y"} for _, original in renamed)  # parameters
    for group in rewrites(LIB, PATH):  # every occurrence of the name, one new name
        if group[0].operator == "rename_local":
            assert len({m.replacement for m in group}) == 1 and len(group) >= 2


def test_a_module_that_does_not_parse_has_no_rewrite():
    assert rewrites("def f(:\n", PATH) == []
    assert choose("def f(:\n", PATH, []) == []


def _bug():
    return next(m for m in mutations(LIB, PATH) if m.function == "area" and m.original == "<")


def test_the_first_choice_rewrites_the_fixed_code_itself_and_kinds_differ():
    bug = _bug()
    chosen = choose(LIB, PATH, [bug], limit=3)
    assert len(chosen) == 3 and len({g[0].operator for g in chosen}) == 3
    first = chosen[0]
    assert first[0].operator == "mirror_compare"
    assert first[0].start <= bug.start and bug.end <= first[0].end  # holds the bug's span
    assert all(any(m.function == "area" for m in g) for g in chosen)
    assert choose(LIB, PATH, [bug], limit=0) == []
    assert choose(LIB, "other.py", [bug]) == []  # no bug in that file


def test_alt_and_overreach_candidates_are_patches_of_the_buggy_state():
    bug = _bug()
    task = Task.from_row(
        {"instance_id": "pypi__lib-1", "repo": "pypi/lib", "base_commit": "a" * 40,
         "patch": "", "FAIL_TO_PASS": ["tests/test_core.py::test_area"]}
    )  # fmt: skip
    wrongs = wrong_mutations([bug], [], 2, mutations(LIB, PATH), {PATH: LIB})
    alts = choose(LIB, PATH, [bug], limit=2)
    cands = candidates(
        task,
        originals={PATH: LIB},
        bugs=[bug],
        wrong=wrongs,
        test_source="",
        alternatives=alts,
        overreach=1,
    )
    by_kind: dict[str, list[str]] = {}
    for kind, patch in cands:
        by_kind.setdefault(kind, []).append(patch)
    assert len(by_kind["alt"]) == 2 and len(by_kind["overreach"]) == 1
    buggy = mutant_texts({PATH: LIB}, [bug])[PATH]

    def applied(patch: str) -> str:
        result = apply_hunks(buggy.splitlines(True), patch_hunks(patch)[PATH])
        assert result is not None
        return "".join(result[0])

    for group, patch in zip(alts, by_kind["alt"], strict=True):
        assert applied(patch) == apply_all(LIB, group)  # the fix, written otherwise
    assert applied(by_kind["overreach"][0]) == apply_all(LIB, [wrongs[-1]])  # fix + wrong edit
    # without the new arguments, the old candidate set
    plain = candidates(task, originals={PATH: LIB}, bugs=[bug], wrong=wrongs, test_source="")
    assert not {"alt", "overreach"} & {kind for kind, _ in plain}


def test_a_rename_never_touches_a_comprehension_name_or_an_fstring_debug_name():
    source = (
        "def names(objs):\n"
        "    kinds = [type.__name__ for type in map(type, objs)]\n"
        "    return kinds\n"
        "\n"
        "\n"
        "def shown(n):\n"
        "    m = n + 1\n"
        '    return f"{m=}"\n'
    )
    renamed = {
        (g[0].function, g[0].original)
        for g in rewrites(source, PATH)
        if g[0].operator == "rename_local"
    }
    assert ("names", "type") not in renamed  # the builtin `type` is read outside the loop
    assert ("names", "kinds") in renamed
    assert ("shown", "m") not in renamed  # f"{m=}" prints the name
    assert rewrites("def f():\r    x = 1\r    return x\r", PATH) == []  # lone CR: no offsets
