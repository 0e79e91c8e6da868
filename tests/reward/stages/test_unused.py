"""Code nothing can run: private module-level definitions nothing refers to stop a
candidate in the semantic stage, when whole files prove it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweworld.reward.candidate import view_candidate
from sweworld.reward.stages.unused import unused_private_names
from sweworld.tasks.patches import make_unified_diff

BASE = (
    "import os\n\n\ndef f(x):\n    return x <= 1\n\n\n"
    "class K:\n    def m(self):\n        return self._hook()\n"
)


def _view(tmp_path: Path, after: str, *, files: bool = True):
    base = tmp_path / "base"
    (base / "pkg").mkdir(parents=True, exist_ok=True)
    (base / "pkg" / "m.py").write_text(BASE)
    patch = make_unified_diff("pkg/m.py", BASE, after)
    return view_candidate(patch, base_dir=base if files else None)


@pytest.mark.parametrize(
    "code",
    [
        "\n_unused = 1\n",
        "\n\ndef _unused(value=None):\n    return value\n",
        "\n\nclass _Unused:\n    pass\n",
        "\n\ndef _a():\n    return 1\n\n\ndef _b():\n    return _a()\n",  # only each other
    ],
)
def test_unused_private_code_is_named(tmp_path, code):
    names = unused_private_names(_view(tmp_path, BASE + code))
    assert names and all(n.startswith("_") for n in names)


@pytest.mark.parametrize(
    "after",
    [
        BASE + "\n\ndef unused(value=None):\n    return value\n",  # public: a test may use it
        BASE.replace("    return x <= 1", "    return _h(x)")
        + "\n\ndef _h(x):\n    return x < 1\n",  # used by the code
        BASE,  # no change at all
        BASE.replace("        return self._hook()\n", "        return self._hook()\n\n"
                     "    def _hook(self):\n        return 2\n"),  # a method: may override a hook
        BASE + "\nimport sys as _sys\n",  # an import runs code
        BASE.replace("x <= 1", "x < 1") + "\n_unused = 1\n",  # a real change besides
    ],
)  # fmt: skip
def test_anything_else_is_not(tmp_path, after):
    assert unused_private_names(_view(tmp_path, after)) == []


def test_a_name_the_tests_use_or_a_hunk_only_view_is_not_proved(tmp_path):
    code = BASE + "\n\ndef _helper():\n    return 1\n"
    assert unused_private_names(_view(tmp_path, code)) == ["_helper"]
    test_patch = "+from pkg.m import _helper\n"
    assert unused_private_names(_view(tmp_path, code), test_patch) == []
    assert unused_private_names(_view(tmp_path, code, files=False)) == []  # no files: no proof
