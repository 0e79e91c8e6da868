"""sweworld.pyast: ast.parse, one thread at a time."""

from __future__ import annotations

import ast
import threading

import sweworld.pyast as pyast


def test_parse_is_ast_parse():
    source = "def f(x):\n    return [y for y in x if y]\n"
    assert ast.dump(pyast.parse(source)) == ast.dump(ast.parse(source))
    assert isinstance(pyast.parse("1 + 2", mode="eval"), ast.Expression)


def test_parses_are_serialised_across_threads():
    done = threading.Event()

    def worker() -> None:
        pyast.parse("x = 1")
        done.set()

    with pyast._LOCK:  # another thread is parsing
        thread = threading.Thread(target=worker)
        thread.start()
        assert not done.wait(0.2)  # ... so this one waits
    thread.join(5)
    assert done.is_set()


def test_parse_shared_returns_one_tree_per_text():
    text = "def shared_tree_probe(a):\n    return a + 1\n"
    first = pyast.parse_shared(text, "a.py")
    assert pyast.parse_shared(text, "b.py") is first
    assert ast.dump(first) == ast.dump(ast.parse(text))
    assert pyast.parse_shared(text + "\n") is not first  # another text, another tree


def test_parse_shared_keeps_a_bounded_amount(monkeypatch):
    text = "x0 = 0\n" + "# pad\n" * 20  # 3 + 20 * 2 tokens
    assert pyast.tree_cost(text) == 43 * pyast.BYTES_PER_TOKEN
    monkeypatch.setenv("SWEWORLD_AST_CACHE_MB", str(pyast.tree_cost(text) * 10 / 1e6))
    texts = [text.replace("x0 = 0", f"x{i} = {i}") for i in range(40)]
    trees = [pyast.parse_shared(t) for t in texts]
    assert pyast.parse_shared(texts[-1]) is trees[-1]  # recent: kept
    assert pyast.parse_shared(texts[0]) is not trees[0]  # oldest: dropped
    big = "y = 1\n" * 100  # over a quarter of the budget: parsed, never kept
    assert pyast.parse_shared(big) is not pyast.parse_shared(big)
    monkeypatch.setenv("SWEWORLD_AST_CACHE_MB", "0")  # none kept
    assert pyast.parse_shared(text) is not pyast.parse_shared(text)
    for bad in ("lots", "inf", "nan", "-inf"):  # not a finite number: the default
        monkeypatch.setenv("SWEWORLD_AST_CACHE_MB", bad)
        assert pyast.cache_limit() == 256_000_000
        assert ast.dump(pyast.parse_shared("z = 2\n")) == ast.dump(ast.parse("z = 2\n"))
    monkeypatch.setenv("SWEWORLD_AST_CACHE_MB", "1e300")
    assert pyast.cache_limit() == 10**12


def test_parse_shared_raises_like_parse():
    import pytest

    for _ in range(2):  # an error is not remembered as a tree
        with pytest.raises(SyntaxError):
            pyast.parse_shared("def broken(:\n", "broken.py")
