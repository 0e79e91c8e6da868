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
