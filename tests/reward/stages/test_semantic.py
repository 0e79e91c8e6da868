"""SemanticStage: empty / no-op / tests-only / tampering flags, equivalence with the gold."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sweworld.reward.candidate import view_candidate, view_gold
from sweworld.reward.stages import SemanticStage
from sweworld.reward.stages.semantic import (
    change_signature,
    gold_equivalent,
    normalize_line,
    normalize_source,
    tampering_reasons,
)
from sweworld.reward.types import RewardContext
from sweworld.tasks.patches import make_unified_diff
from sweworld.tasks.toy import toy_data_dir
from tests.reward.stages import context, diff, make_repo, toy_base, write

MOD = '''\
"""Module docstring."""


def area(w, h):
    """Area of a rectangle."""
    return w * h  # simple


class Box:
    """A box."""

    def volume(self, w, h, d):
        return area(w, h) * d
'''

TESTS = """\
import pytest

from pkg.mod import area


def test_area():
    assert area(2, 3) == 6
    assert area(0, 3) == 0


class TestBox:
    def test_volume(self):
        self.assertEqual(1, 1)
        assert True
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "repo",
        {
            "pkg/mod.py": MOD,
            "tests/test_mod.py": TESTS,
            "tests/test_other.py": "def test_other():\n    assert 1\n",
            "README.md": "readme\n",
        },
    )


def judge(patch: str | None, base: Path | None, *, gold: str | None = None, mode="oracle"):
    view = view_candidate(patch, base_dir=base)
    gold_view = view_candidate(gold, base_dir=base) if gold is not None else None
    task = {"patch": gold or ""}
    ctx = RewardContext(task=task, candidate=view, mode=mode, gold=gold_view)
    return SemanticStage().run(ctx)


# ------------------------------------------------------------------ normalisation


def test_normalize_source() -> None:
    variant = (
        "# leading comment\n\ndef area( w,h ):\n    '''Other words.'''\n"
        "    return (w*h)\n\n\nclass Box:\n    def volume(self,w,h,d):\n"
        "        return area(w,h)*d  # trailing\n"
    )
    assert normalize_source(MOD) == normalize_source(variant)
    assert normalize_source(MOD) != normalize_source(MOD.replace("w * h", "w + h"))
    assert "Area of" not in normalize_source(MOD) and "#" not in normalize_source(MOD)
    # a class whose only statement is its docstring stays valid code
    assert normalize_source('class A:\n    """doc"""\n') == "class A:\n    pass"


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 parses it with ast")
def test_normalize_source_token_fallback() -> None:
    code = 'type Alias = int  # c\n\n\nasync def f( x ):\n    """doc"""\n    return [x,\n  1]\n'
    normalized = normalize_source(code)
    assert normalized.startswith("#tokens")
    assert "doc" not in normalized and "# c" not in normalized
    assert normalized == normalize_source("type Alias = int\nasync def f(x):\n    return [x, 1]\n")
    assert normalized != normalize_source("type Alias = str\nasync def f(x):\n    return [x, 1]\n")


def test_normalize_source_never_raises() -> None:
    chain = "x = (" + "\n".join(["1 +"] * 5000) + "1)\n"  # libcst: minutes
    for text in ("def (:\n", "\0\0", "x = " + "(" * 5000, "'''unterminated", chain):
        assert isinstance(normalize_source(text), str)
    assert normalize_line("    x  =  '#'   # comment\n") == "    x = '#'"
    assert normalize_line("   # only a comment") == ""


# ------------------------------------------------------------------ red flags


@pytest.mark.parametrize("with_base", [True, False])
def test_empty_and_noop(repo: Path, with_base: bool) -> None:
    base = repo if with_base else None
    result = judge("", base)
    assert result.verdict == "fail" and result.short_circuit and result.score == 0.0
    assert result.evidence["empty"]
    write(repo, {"pkg/mod.py": MOD.replace("# simple", "# simpler, clearer") + "# end\n"})
    result = judge(diff(repo), base)
    assert result.verdict == "fail" and result.evidence["noop"], result.evidence
    assert "no-op" in result.message


def test_docstring_and_formatting_changes_are_noop_with_base(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("Area of a rectangle.", "Width times height.")})
    assert judge(diff(repo), repo).evidence["noop"]
    write(repo, {"pkg/mod.py": MOD.replace("return w * h", "return (w*h)")})
    assert judge(diff(repo), repo).evidence["noop"]
    write(repo, {"pkg/mod.py": MOD.replace("return w * h", "return w * h * 1")})
    result = judge(diff(repo), repo)
    assert not result.evidence["noop"] and result.verdict == "pass"


def test_indentation_change_is_not_noop_in_hunks(repo: Path) -> None:
    moved = MOD.replace("        return area(w, h) * d", "        pass\n    return area(w, h) * d")
    write(repo, {"pkg/mod.py": moved})
    result = judge(diff(repo), None)
    assert result.evidence["noop"] is False and result.verdict == "pass"


@pytest.mark.parametrize("with_base", [True, False])
def test_tests_only(repo: Path, with_base: bool) -> None:
    base = repo if with_base else None
    write(repo, {"tests/test_new.py": "def test_new():\n    assert 2\n"})
    tests_patch = diff(repo)
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w")})
    code_patch = diff(repo)
    result = judge(tests_patch, base, gold=code_patch)
    assert result.verdict == "fail" and result.evidence["tests_only"]
    assert result.evidence["gold_touches_code"] is True
    blind = judge(tests_patch, base, mode="blind")
    assert blind.verdict == "fail" and blind.evidence["gold_touches_code"] is None
    # a task whose own fix only touches tests: tests-only is not a red flag
    same = judge(tests_patch, base, gold=tests_patch)
    assert same.verdict == "pass" and same.evidence["gold_touches_code"] is False


TAMPERING = {
    "deletes": ({"tests/test_other.py": None}, "deletes test file tests/test_other.py"),
    "removes test": (
        {"tests/test_mod.py": TESTS.replace("def test_area():", "def helper_area():")},
        "removes test tests/test_mod.py::test_area",
    ),
    "removes assert": (
        {"tests/test_mod.py": TESTS.replace("    assert area(0, 3) == 0\n", "")},
        "assertion(s) from tests/test_mod.py",
    ),
    "removes self.assert": (
        {"tests/test_mod.py": TESTS.replace("        self.assertEqual(1, 1)\n", "")},
        "assertion(s) from tests/test_mod.py",
    ),
    "skip marker": (
        {"tests/test_mod.py": TESTS.replace("def test_area", "@pytest.mark.skip\ndef test_area")},
        "adds skip/xfail markers to tests/test_mod.py",
    ),
    "pytest.skip": (
        {
            "tests/test_mod.py": TESTS.replace(
                "    assert area(2, 3)", "    pytest.skip()\n    assert area(2, 3)"
            )
        },
        "adds skip/xfail markers to tests/test_mod.py",
    ),
    "early return": (
        {
            "tests/test_mod.py": TESTS.replace(
                "def test_area():\n", "def test_area():\n    return\n"
            )
        },
        "returns at the top of tests/test_mod.py::test_area",
    ),
    "conftest": (
        {"conftest.py": "def pytest_collection_modifyitems(items):\n    items.clear()\n"},
        "edits test-runner code conftest.py",
    ),
}


@pytest.mark.parametrize("with_base", [True, False])
@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampering(repo: Path, case: str, with_base: bool) -> None:
    files, expected = TAMPERING[case]
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w"), **files})
    result = judge(diff(repo), repo if with_base else None)
    assert result.verdict == "fail" and result.short_circuit and result.score == 0.0
    assert result.evidence["test_tampering"] is True
    assert any(expected in reason for reason in result.evidence["tampering"]), result.evidence


def test_adding_tests_is_not_tampering(repo: Path) -> None:
    extra = TESTS + "\n\ndef test_more():\n    assert area(1, 1) == 1\n"
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w"), "tests/test_mod.py": extra})
    for base in (repo, None):
        view = view_candidate(diff_again(repo, extra), base_dir=base)
        assert tampering_reasons(view) == []


def diff_again(repo: Path, tests: str) -> str:
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w"), "tests/test_mod.py": tests})
    return diff(repo)


# ------------------------------------------------------------------ gold equivalence


@pytest.mark.parametrize("with_base", [True, False])
def test_toy_gold_is_equivalent_to_itself(toy_tasks, tmp_path: Path, with_base: bool) -> None:
    for task in toy_tasks:
        base = toy_base(task, tmp_path / task.instance_id) if with_base else None
        result = SemanticStage().run(context(task, task.patch, base))
        assert result.verdict == "pass" and result.score == 1.0, result.evidence
        assert result.evidence["gold_equivalent"] is True
        assert not result.evidence["noop"] and not result.evidence["test_tampering"]
        blind = SemanticStage().run(context(task, task.patch, base, mode="blind"))
        assert blind.verdict == "pass" and blind.score is None
        assert blind.evidence["gold_equivalent"] is None


def test_toy_gold_variants(toy_tasks, tmp_path: Path) -> None:
    for task in toy_tasks:
        base = toy_base(task, tmp_path / task.instance_id)
        gold = view_gold(task, base)
        assert gold is not None
        (changed,) = gold.files
        assert changed.before is not None and changed.after is not None
        # reformatted and commented: equivalent with whole files
        variant = "# reviewed\n" + reformat(changed.after)
        assert variant.count(" ,  ") > 2
        patch = make_unified_diff(changed.path, changed.before, variant)
        result = SemanticStage().run(context(task, patch, base))
        assert result.evidence["gold_equivalent"] is True and result.score == 1.0
        # commented only: equivalent with hunks too
        commented = changed.after.replace("\n\n\n", "\n\n\n# a note\n", 1)
        patch = make_unified_diff(changed.path, changed.before, commented)
        hunks = view_candidate(patch)
        assert gold_equivalent(hunks, view_gold(task)) is True
        # a different change is not equivalent
        wrong = changed.before.replace("return", "return  ", 1) + "\nWRONG = 1\n"
        patch = make_unified_diff(changed.path, changed.before, wrong)
        result = SemanticStage().run(context(task, patch, base))
        assert result.evidence["gold_equivalent"] is False and result.score is None
        assert result.verdict == "pass"


def test_the_gold_lines_in_another_place_are_not_equivalent(toy_tasks) -> None:
    """Hunks only (no base checkout): the gold fix of stockroom-2 (a check added to
    ``remove_stock``) pasted into ``add_stock`` had the same removed and added lines, so it
    was "equivalent to the gold patch": resolved, reward 1, without a test."""
    task = next(t for t in toy_tasks if t.instance_id == "sweworld__stockroom-2")
    path = "stockroom/inventory.py"
    before = (toy_data_dir() / "repo" / path).read_text()
    lines = before.splitlines(keepends=True)
    anchor = "        item = self.get(sku)\n"
    first = lines.index(anchor)  # add_stock's; the gold adds its lines after the second
    assert lines.index(anchor, first + 1) > first
    check = [
        "        if quantity > item.quantity:\n",
        "            raise InsufficientStockError(sku, quantity, item.quantity)\n",
    ]
    misplaced = make_unified_diff(
        path, before, "".join(lines[: first + 1] + check + lines[first + 1 :])
    )
    assert gold_equivalent(view_candidate(misplaced), view_gold(task)) is False
    result = SemanticStage().run(context(task, misplaced, None))
    assert result.evidence["gold_equivalent"] is False and result.score is None
    # the gold itself, and the gold with a comment added, still are
    assert gold_equivalent(view_candidate(task.patch), view_gold(task)) is True
    second = lines.index(anchor, first + 1)
    commented = [*lines[: second + 1], "        # enough stock?\n", *check, *lines[second + 1 :]]
    patch = make_unified_diff(path, before, "".join(commented))
    assert gold_equivalent(view_candidate(patch), view_gold(task)) is True


def reformat(text: str) -> str:
    """Spacing changes on lines without string literals, a comment after every blank line."""
    out = []
    for line in text.split("\n"):
        if not any(q in line for q in "\"'#"):
            line = line.replace(", ", " ,  ").replace("(", "( ")
        out.append(line if line.strip() else "# spacer")
    return "\n".join(out)


def test_gold_equivalence_undecidable(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w")})
    patch = diff(repo)
    view = view_candidate(patch, base_dir=repo)
    assert gold_equivalent(view, None) is None
    assert gold_equivalent(view, view_candidate("garbage\n")) is None
    assert gold_equivalent(view, view_candidate("")) is None
    assert gold_equivalent(view_candidate("garbage\n"), view) is None
    binary = make_repo(repo.parent / "bin", {"x.bin": b"\x00\x01"})
    write(binary, {"x.bin": b"\x00\x02"})
    bview = view_candidate(diff(binary, "--binary"), base_dir=binary)
    assert gold_equivalent(bview, bview) is None


def test_equivalence_classes(repo: Path) -> None:
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w")})
    a = diff(repo)
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h*w  # swapped").replace('"""A box."""', "")})
    b = diff(repo)
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "w * h * 2")})
    c = diff(repo)
    write(repo, {"pkg/mod.py": MOD.replace("# simple", "# comment only")})
    noop = diff(repo)
    views = [view_candidate(p, base_dir=repo) for p in (a, c, b, "", noop, "junk\n", "junk\n")]
    sig = [change_signature(v) for v in views]
    assert sig[0] == sig[2] and sig[3] == sig[4] and sig[5] == sig[6]
    assert len({sig[0], sig[1], sig[3], sig[5]}) == 4
    assert change_signature(views[0]) == change_signature(view_candidate(a, base_dir=repo))
    assert change_signature(views[0]) != change_signature(views[1])


def test_bad_input_gives_results(repo: Path) -> None:
    garbage = judge("not a patch\n", repo)
    assert garbage.verdict == "skip" and garbage.evidence["parse_error"]
    unapplied = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n \n"
    result = judge(unapplied, repo)
    assert result.verdict == "pass" and result.evidence["scope"] == "hunks"
    escape = "--- /dev/null\n+++ b/../x.py\n@@ -0,0 +1 @@\n+x = 1\n"
    assert judge(escape, repo).verdict == "skip"


GUARDS = "        if d < 0:\n            return 0\n        if w < 0:\n            return 0\n"
GUARDS_SWAPPED = (
    "        if w < 0:\n            return 0\n        if d < 0:\n            return 0\n"
)


@pytest.mark.parametrize("with_base", [True, False])
def test_moving_lines_is_a_change_not_a_noop(repo: Path, with_base: bool) -> None:
    # Reordering two statements (as in sympy__sympy-20801's resolved fix) changes behaviour.
    write(
        repo,
        {
            "pkg/mod.py": MOD.replace(
                "    def volume(self, w, h, d):\n        return area(w, h) * d\n",
                "    def volume(self, w, h, d):\n        if d < 0:\n            return 0\n"
                "        if w < 0:\n            return 0\n        return area(w, h) * d\n",
            )
        },
    )
    subprocess_commit(repo)
    write(
        repo,
        {
            "pkg/mod.py": (repo / "pkg/mod.py")
            .read_text()
            .replace(
                GUARDS,
                GUARDS_SWAPPED,
            )
        },
    )
    patch = diff(repo)
    result = judge(patch, repo if with_base else None)
    assert result.evidence["noop"] is False, result.evidence
    assert result.verdict == "pass" and not result.short_circuit


@pytest.mark.parametrize("with_base", [True, False])
def test_new_skipped_tests_are_not_tampering_but_skipping_old_ones_is(
    repo: Path, with_base: bool
) -> None:
    added = TESTS + "\n\n@pytest.mark.skip(reason='new behaviour')\ndef test_new():\n    pass\n"
    write(repo, {"tests/test_mod.py": added})
    result = judge(diff(repo), repo if with_base else None)
    assert result.evidence["test_tampering"] is False, result.evidence
    skipped_old = TESTS.replace("def test_area():", "@pytest.mark.skip\ndef test_area():")
    write(repo, {"tests/test_mod.py": skipped_old})
    result = judge(diff(repo), repo if with_base else None)
    assert result.evidence["test_tampering"] is True
    assert any("skip" in r for r in result.evidence["tampering"])


def subprocess_commit(repo: Path) -> None:
    import subprocess

    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"],
        cwd=repo,
        check=True,
    )


# ------------------------------------------------------------------ runner configuration

SETUP_CFG = """\
[metadata]
name = pkg

[tool:pytest]
addopts = -p no:cacheprovider
testpaths = tests
"""

TOX_INI = """\
[tox]
envlist = py311

[testenv]
commands = pytest {posargs}

[pytest]
addopts = --doctest-modules
filterwarnings =
    error
"""

PYPROJECT = """\
[project]
name = "pkg"

[tool.pytest.ini_options]
addopts = "-ra"
testpaths = ["tests"]
"""

CONFIG_BASE = {"setup.cfg": SETUP_CFG, "tox.ini": TOX_INI, "pyproject.toml": PYPROJECT}

# Edits a real submission carries without changing any outcome (not tampering).
HARMLESS_CONFIG = {
    "setup.cfg -rA (the harness's setup)": (
        "setup.cfg",
        SETUP_CFG.replace("addopts = -p no:cacheprovider", "addopts = -p no:cacheprovider -rA"),
    ),
    "tox.ini -rA": ("tox.ini", TOX_INI.replace("--doctest-modules", "--doctest-modules -rA")),
    "tox.ini verbosity and traceback": (
        "tox.ini",
        TOX_INI.replace("--doctest-modules", "--doctest-modules -vv --tb=short --color=no"),
    ),
    "tox.ini test command -rA (the harness's setup)": (
        "tox.ini",
        TOX_INI.replace("commands = pytest {posargs}", "commands = pytest -rA {posargs}"),
    ),
    "pyproject -rA": ("pyproject.toml", PYPROJECT.replace('"-ra"', '"-rA -v"')),
    "pyproject metadata": ("pyproject.toml", PYPROJECT.replace('"pkg"', '"pkg2"')),
    "setup.cfg markers": (
        "setup.cfg",
        SETUP_CFG + "markers =\n    slow: slow tests\n",
    ),
}

# Edits that can change a test outcome (tampering).
OUTCOME_CONFIG = {
    "deselect": ("setup.cfg", "-p no:cacheprovider --deselect tests/test_mod.py::test_area"),
    "-k": ("setup.cfg", "-p no:cacheprovider -k 'not area'"),
    "-m": ("setup.cfg", "-p no:cacheprovider -m 'not slow'"),
    "--ignore": ("setup.cfg", "-p no:cacheprovider --ignore=tests/test_mod.py"),
    "plugin off": ("setup.cfg", "-p no:cacheprovider -p no:doctest"),
    "collection errors": ("setup.cfg", "-p no:cacheprovider --continue-on-collection-errors"),
    "-W ignore": ("setup.cfg", "-p no:cacheprovider -W ignore"),
    "drops doctests": ("tox.ini", ""),
}
OUTCOME_SETTINGS = {
    "testpaths": ("setup.cfg", SETUP_CFG.replace("testpaths = tests", "testpaths = pkg")),
    "python_files": ("setup.cfg", SETUP_CFG + "python_files = nothing_*.py\n"),
    "norecursedirs": ("setup.cfg", SETUP_CFG + "norecursedirs = tests\n"),
    "filterwarnings": ("tox.ini", TOX_INI.replace("    error\n", "    ignore\n")),
    "xfail_strict": ("pyproject.toml", PYPROJECT + "xfail_strict = false\n"),
    "pyproject testpaths": ("pyproject.toml", PYPROJECT.replace('["tests"]', '["pkg"]')),
    "pyproject -k": ("pyproject.toml", PYPROJECT.replace('"-ra"', '"-ra -k not_area"')),
    # tox's test command is the run (SWE-bench runs some repositories through tox)
    "tox.ini test command -x": (
        "tox.ini",
        TOX_INI.replace("commands = pytest {posargs}", "commands = pytest -x {posargs}"),
    ),
}


def config_repo(tmp_path: Path) -> Path:
    return make_repo(
        tmp_path / "cfg",
        {"pkg/mod.py": MOD, "tests/test_mod.py": TESTS, **CONFIG_BASE},
    )


def config_patch(repo: Path, path: str, text: str) -> str:
    write(repo, {"pkg/mod.py": MOD.replace("w * h", "h * w"), path: text})
    return diff(repo)


@pytest.mark.parametrize("with_base", [True, False])
@pytest.mark.parametrize("case", sorted(HARMLESS_CONFIG))
def test_reporting_config_edits_are_not_tampering(tmp_path, case, with_base):
    repo = config_repo(tmp_path)
    path, text = HARMLESS_CONFIG[case]
    patch = config_patch(repo, path, text)
    result = judge(patch, repo if with_base else None)
    assert result.evidence["tampering"] == [], result.evidence["tampering"]
    assert result.verdict == "pass" and not result.short_circuit


def _outcome_cases() -> dict[str, tuple[str, str]]:
    cases = dict(OUTCOME_SETTINGS)
    for name, (path, opts) in OUTCOME_CONFIG.items():
        if path == "setup.cfg":
            cases[name] = (
                path,
                SETUP_CFG.replace("addopts = -p no:cacheprovider", f"addopts = {opts}"),
            )
        else:
            cases[name] = (path, TOX_INI.replace("--doctest-modules", opts))
    return cases


@pytest.mark.parametrize("with_base", [True, False])
@pytest.mark.parametrize("case", sorted(_outcome_cases()))
def test_outcome_changing_config_edits_are_tampering(tmp_path, case, with_base):
    repo = config_repo(tmp_path)
    path, text = _outcome_cases()[case]
    patch = config_patch(repo, path, text)
    result = judge(patch, repo if with_base else None)
    assert result.verdict == "fail" and result.short_circuit, case
    assert any(path in reason for reason in result.evidence["tampering"]), result.evidence


# ------------------------------------------------------------------ the runner, from the code


HIJACKS = {
    "exit at import": MOD + "\nimport sys\nsys.exit(0)\n",
    "os._exit": MOD + "\nimport os\nos._exit(0)\n",
    "pytest internals": MOD + "\nimport _pytest.runner\n",
    "monkeypatch pytest": MOD + "\nimport pytest\npytest.fail = lambda *a, **k: None\n",
    "replace unittest": MOD
    + "\nimport unittest\nunittest.TestCase.run = lambda self, r=None: None\n",
    "sys.modules": MOD + "\nimport sys\nsys.modules['pytest'] = None\n",
    # these passed as "no semantic red flag" before: the same takeovers, written otherwise
    "raise SystemExit": MOD + "\nraise SystemExit(0)\n",
    "skip at import": MOD + "\nimport pytest\npytest.skip('later', allow_module_level=True)\n",
    "raise SkipTest": MOD + "\nimport unittest\nraise unittest.SkipTest('later')\n",
}


@pytest.mark.parametrize("with_base", [True, False])
@pytest.mark.parametrize("case", sorted(HIJACKS))
def test_code_that_takes_over_the_runner_is_tampering(repo, case, with_base):
    write(repo, {"pkg/mod.py": HIJACKS[case]})
    result = judge(diff(repo), repo if with_base else None)
    assert result.verdict == "fail" and result.evidence["test_tampering"], result.evidence
    assert any("pkg/mod.py" in reason for reason in result.evidence["tampering"])


NESTED_HIJACKS = {
    "exit inside an if": MOD + "\nimport sys\nif True:\n    sys.exit(0)\n",
    "exit inside a try": MOD + "\nimport os\ntry:\n    os._exit(0)\nexcept Exception:\n    pass\n",
    "skip inside a with": MOD + "\nimport pytest, contextlib\nwith contextlib.suppress():\n"
    "    pytest.skip('x', allow_module_level=True)\n",
}


@pytest.mark.parametrize("case", sorted(NESTED_HIJACKS))
def test_takeovers_nested_in_module_level_blocks_are_tampering(repo, case):
    """Whole files only: in a hunk, an indented line may as well be inside a function."""
    write(repo, {"pkg/mod.py": NESTED_HIJACKS[case]})
    result = judge(diff(repo), repo)
    assert result.verdict == "fail" and result.evidence["test_tampering"], result.evidence


def test_ordinary_exits_and_runner_sources_are_not_tampering(repo):
    # sys.exit inside a function (a CLI's main) is code, not a takeover
    write(repo, {"pkg/mod.py": MOD + "\n\ndef main():\n    import sys\n    sys.exit(0)\n"})
    assert judge(diff(repo), repo).evidence["tampering"] == []
    # ... and so is an exit behind a __main__ guard
    guarded = MOD + "\nimport sys\n\nif __name__ == '__main__':\n    raise SystemExit(0)\n"
    write(repo, {"pkg/mod.py": guarded})
    assert judge(diff(repo), repo).evidence["tampering"] == []
    # a package's __main__.py exits by design (it runs as a program, not on import)
    main_py = make_unified_diff("pkg/__main__.py", None, "import sys\n\nsys.exit(0)\n")
    assert tampering_reasons(view_candidate(main_py, base_dir=None)) == []
    # pytest's own source: editing the runner is the task
    assert (
        tampering_reasons(
            view_candidate(
                make_unified_diff(
                    "src/_pytest/runner.py", "x = 1\n", "import _pytest.nodes\nx = 2\n"
                ),
                base_dir=None,
            )
        )
        == []
    )
