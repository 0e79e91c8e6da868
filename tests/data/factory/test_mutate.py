"""Mutation operators: each on small code, exact spans, mutants that parse, seeded samples."""

from __future__ import annotations

import ast

import pytest

from sweworld.data.factory.mutate import OPERATORS, apply_mutation, mutations, sample

CODE = '''\
"""A module."""


def f(a, b=3, flag=True, name="x"):
    """Doc."""
    if a < b and flag:  # keep this comment
        total = a + b
        log(a, b)
        return total
    for i in range(len(name)):
        name = name[1:a]
    if not flag:
        raise ValueError("bad")
    try:
        return {"é": 1}[name] == 2
    except KeyError:
        return False
'''


def by_op(op: str) -> list:
    return [m for m in mutations(CODE, "m.py") if m.operator == op]


@pytest.mark.parametrize(
    ("op", "original", "replacement"),
    [
        ("compare", "<", "<="),
        ("compare", "==", "!="),
        ("arith", "+", "-"),
        ("bool", "and", "or"),
        ("off_by_one", "2", "3"),
        ("off_by_one", "a", "a + 1"),
        ("off_by_one", "len(name)", "len(name) - 1"),
        ("negate", "a < b and flag", "not (a < b and flag)"),
        ("negate", "not flag", "flag"),
        ("remove_stmt", "log(a, b)", "pass"),
        ("remove_stmt", "total = a + b", "pass"),
        ("return_value", "total", "None"),
        ("return_value", "False", "True"),
        ("swap_args", "a, b", "b, a"),
        ("default", "3", "4"),
        ("default", "True", "False"),
        ("default", '"x"', "''"),
        ("exception", "ValueError", "TypeError"),
        ("exception", "KeyError", "IndexError"),
    ],
)
def test_each_operator_edits_only_its_span(op: str, original: str, replacement: str) -> None:
    found = [m for m in by_op(op) if m.original == original and m.replacement == replacement]
    assert found, f"{op}: no {original!r} -> {replacement!r} in {by_op(op)}"
    m = found[0]
    out = apply_mutation(CODE, m)
    ast.parse(out)
    data, new = CODE.encode(), out.encode()
    assert data[m.start : m.end].decode() == original
    assert new[: m.start] == data[: m.start]  # everything before the span kept byte for byte
    assert new[m.start + len(replacement.encode()) :] == data[m.end :]
    assert "# keep this comment" in out
    assert m.function == "f"


def test_spans_are_byte_offsets_after_non_ascii() -> None:
    m = next(x for x in by_op("compare") if x.original == "==")
    assert apply_mutation(CODE, m).count('{"é": 1}[name] != 2') == 1


def test_every_kind_is_found_and_every_mutant_parses() -> None:
    found = mutations(CODE, "m.py")
    assert {m.operator for m in found} == set(OPERATORS)
    for m in found:
        ast.parse(apply_mutation(CODE, m))
    assert not any(m.line == 1 for m in found)  # the module docstring is never touched


def test_operator_hidden_behind_a_comment_or_parentheses() -> None:
    code = (
        "def g(a, b):\n    return (a) + (b)\n\n\ndef h(a, b):\n    return a + (  # c\n        b)\n"
    )
    ops = [m for m in mutations(code, "g.py") if m.operator == "arith"]
    assert [m.function for m in ops] == ["g"]  # h's gap holds a comment: not touched
    assert apply_mutation(code, ops[0]).splitlines()[1] == "    return (a) - (b)"


def test_a_source_that_does_not_parse_has_no_mutation() -> None:
    assert mutations("def f(:\n", "bad.py") == []


def test_apply_refuses_a_changed_source() -> None:
    m = by_op("bool")[0]
    with pytest.raises(ValueError):
        apply_mutation(CODE.replace("and flag", "or  flag"), m)


def test_sample_is_seeded_balanced_and_limited() -> None:
    found = mutations(CODE, "m.py")
    one, two = sample(found, 7, 10), sample(found, 7, 10)
    assert one == two and len(one) == 10
    assert len({m.operator for m in one}) == 10  # round robin: one of each kind first
    assert sample(found, 8, 10) != one
    assert all(m.function for m in sample(found, 1))


def test_mutants_are_parsed_only_when_used(monkeypatch) -> None:
    """Listing a library's mutations parses each file once, not once per mutation (that was
    quadratic: minutes for one 3,000-line module); only the mutants used are parsed."""
    from sweworld.data.factory import mutate
    from sweworld.data.factory.pipeline import first_parsing

    body = "".join(f"def f{i}(a, b=1):\n    return a + b < {i} and a * 2\n\n\n" for i in range(200))
    real_parse = ast.parse
    calls = []
    monkeypatch.setattr(mutate.ast, "parse", lambda *a, **k: calls.append(1) or real_parse(*a, **k))
    found = mutate.mutations(body, "m.py", check=False)
    assert len(found) > 1000 and len(calls) == 1
    broken = mutate.Mutation("m.py", "arith", 0, 3, "def", "(", 1, "f0")
    chosen = first_parsing([broken, *mutate.sample(found, 0)], {"m.py": body}, 5)
    assert len(chosen) == 5 and broken not in chosen and len(calls) == 1 + 6
    assert all(mutate.parses(body, m) for m in chosen)
