"""Which definitions two texts differ in, and whether they are the same program: the
line-compared answers equal the whole-tree dumps' answers on real modules edited at random."""

from __future__ import annotations

import ast
import inspect
import random
import re
import shlex
import textwrap

import pytest

import sweworld.pyast as pyast
from sweworld.transition.outcome.programs import changed_names, same_program


def _dumps(text: str | None) -> dict[str, str]:
    """The reference: every definition's whole dump (and the rest of the module's)."""
    try:
        tree = ast.parse(text) if text is not None else None
    except SyntaxError:
        tree = None
    if tree is None:
        return {}
    out, rest = {}, []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = ast.dump(node)
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out[f"{node.name}.{sub.name}"] = ast.dump(sub)
        else:
            rest.append(node)
    out["<module>"] = ast.dump(ast.Module(body=rest, type_ignores=[]))
    return out


def _reference_changed(before: str, after: str) -> set[str]:
    a, b = _dumps(before), _dumps(after)
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def _reference_same(left: str, right: str) -> bool:
    if left == right:
        return True
    try:
        trees = [pyast.strip_docstrings(ast.parse(t)) for t in (left, right)]
    except SyntaxError:
        return False
    return ast.dump(trees[0]) == ast.dump(trees[1])


def _edit(lines: list[str], rng: random.Random) -> list[str]:
    """One random edit of the kind an agent's change makes."""
    out = list(lines)
    i = rng.randrange(len(out))
    kind = rng.choice(["delete", "duplicate", "comment", "constant", "docstring", "swap",
                       "decorate", "blank", "semicolon", "reindent", "undoc"])  # fmt: skip
    if kind == "delete":
        del out[i]
    elif kind == "duplicate":
        out.insert(i, out[i])
    elif kind == "comment":
        out[i] = out[i] + "  # note"
    elif kind == "constant":
        out[i] = out[i].replace("1", "2", 1).replace("None", "0", 1)
    elif kind == "docstring":
        out[i] = out[i].replace('"""', '"""Changed. ', 1)
    elif kind == "swap" and i + 1 < len(out):
        out[i], out[i + 1] = out[i + 1], out[i]
    elif kind == "decorate" and out[i].lstrip().startswith("def "):
        indent = out[i][: len(out[i]) - len(out[i].lstrip())]
        out.insert(i, f"{indent}@staticmethod")
    elif kind == "blank":
        out.insert(i, "")
    elif kind == "semicolon" and out[i].strip() and not out[i].rstrip().endswith(":"):
        out[i] = out[i] + "; x = 1"
    elif kind == "reindent":
        out[i] = " " + out[i]
    elif kind == "undoc":  # a one-line docstring becomes a comment, a pass or another one
        docs = [k for k, line in enumerate(out) if re.fullmatch(r'\s*""".+"""', line)]
        if docs:
            k = rng.choice(docs)
            indent = out[k][: len(out[k]) - len(out[k].lstrip())]
            out[k] = indent + rng.choice(["pass", "# gone", '"""Other."""'])
    return out


@pytest.mark.parametrize("module", [shlex, textwrap, random])
def test_answers_equal_the_whole_dumps_on_random_edits(module) -> None:
    source = inspect.getsource(module)
    lines = source.split("\n")
    rng = random.Random(7)
    parsed, same = 0, 0
    for _ in range(40):
        edited = lines
        for _ in range(rng.randint(1, 3)):
            edited = _edit(edited, rng)
        after = "\n".join(edited)
        assert changed_names(source, after) == _reference_changed(source, after)
        assert same_program(source, after) == _reference_same(source, after)
        assert same_program(after, source) == _reference_same(after, source)
        parsed += _dumps(after) != {}
        same += same_program(source, after)
    assert parsed >= 10 and 3 <= same < 40  # both answers were exercised


def test_docstrings_comments_and_layout_are_not_changes() -> None:
    before = 'def f():\n    """Doc."""\n    return 1\n'
    assert same_program(before, 'def f():\n    """Other doc."""\n    return (1)  # c\n')
    assert same_program(before, "\n\ndef f():\n    return 1\n")  # moved, docstring dropped
    assert not same_program(before, 'def f():\n    """Doc."""\n    return 2\n')
    assert changed_names(before, 'def f():\n    """Other."""\n    return 1\n') == {"f"}
    # order matters to the program, not to the definitions
    two = "def f():\n    pass\n\ndef g():\n    pass\n"
    swapped = "def g():\n    pass\n\ndef f():\n    pass\n"
    assert not same_program(two, swapped) and changed_names(two, swapped) == set()


def test_a_decorator_or_a_statement_on_the_same_line_is_a_change() -> None:
    before = "import os\n\n\ndef f():\n    pass\n\nx = 1; y = 2\n"
    assert changed_names(before, before.replace("def f", "@staticmethod\ndef f")) == {"f"}
    assert changed_names(before, before.replace("y = 2", "y = 3")) == {"<module>"}
    assert not same_program(before, before.replace("x = 1; y = 2", "y = 2; x = 1"))


def test_carriage_returns_and_texts_that_do_not_parse() -> None:
    before = "def f():\r\n    return 1\r\n\r\ndef g():\r\n    return 2\r\n"
    after = before.replace("return 2", "return 3")
    assert changed_names(before, after) == _reference_changed(before, after) == {"g"}
    assert same_program(before, before.replace("\r\n", "\n"))
    assert not same_program("def f(:\n", "def f(:\n  \n")  # neither parses: texts differ
    assert same_program("def f(:\n", "def f(:\n")
    assert changed_names("def f(:\n", "def f():\n    pass\n") == {"f", "<module>"}
    assert same_program(None, None) and not same_program(None, "x = 1\n")


def test_an_expression_too_deep_to_dump_differs_when_its_lines_differ() -> None:
    """It parses, but dumping or copying it overflows the recursion limit: no error, and a
    change of its lines is a change (the rest of the file is still compared)."""
    deep = "x = " + "+".join(["1"] * 1500) + "\n"
    before = deep + "\ndef f():\n    return 1\n"
    after = deep.replace("1\n", "2\n") + "\ndef f():\n    return 1\n"
    assert changed_names(before, after) == {"<module>"}
    assert not same_program(before, after) and same_program(before, before + "\n")
    assert changed_names(before, before.replace("return 1", "return 2")) == {"f"}


def test_a_def_nested_deep_enough_to_overflow_a_copy_is_still_compared_exactly() -> None:
    """Copying a tree takes more stack than dumping it: a docstring change inside a def
    with a 400-term expression is still no change (the whole trees are dumped instead)."""
    deep = "+".join(["1"] * 400)
    a = f'if True:\n    def f():\n        "doc1"\n        return {deep}\n'
    b = a.replace("doc1", "doc2")
    assert same_program(a, b) == _reference_same(a, b) is True


def test_an_answer_made_short_of_stack_is_not_kept() -> None:
    """Run out of stack deep in a caller, the answer is the conservative one, and a later
    caller with room gets the exact one (it was not cached)."""
    a = "x = " + "+".join(["1"] * 300) + "\n"
    b = a.replace("\n", "  # c\n")

    def deep(n: int) -> tuple[bool, set[str]]:
        return (same_program(a, b), changed_names(a, b)) if n == 0 else deep(n - 1)

    deep(850)
    assert same_program(a, b) and changed_names(a, b) == set() == _reference_changed(a, b)


def test_a_literal_too_long_to_print_gets_the_conservative_answer() -> None:
    big = "0x" + "f" * 4000  # parses, but its dump exceeds the int-to-text digit limit
    before, after = f"x = {big}\n", f"x = {big}  # c\n"
    assert changed_names(before, after) == {"<module>"}  # its lines differ
    assert not same_program(before, after)
    assert changed_names(before, before) == set() and same_program(before, before)


def test_many_statements_on_one_line() -> None:
    n = 3000
    a = ";".join(f"x{i}={i}" for i in range(n)) + "\n"
    b = a.replace(f"x{n - 1}={n - 1}", f"x{n - 1}=0")
    assert changed_names(a, b) == {"<module>"} == _reference_changed(a, b)
    assert not same_program(a, b) and same_program(a, a + "\n")
