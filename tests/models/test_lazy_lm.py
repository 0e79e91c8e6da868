"""LazyLM: loaded once under concurrency, closed before or after loading, clear errors on a
loader that fails, answers None or loads itself."""

from __future__ import annotations

import copy
import threading
import time

import pytest

from sweworld.models import LazyLM, LMUnavailable


class Model:
    def __init__(self) -> None:
        self.closed = 0
        self.name = "m"

    def generate(self, requests, **options):
        return ["ok" for _ in requests]

    def close(self) -> None:
        self.closed += 1


def test_two_threads_load_once() -> None:
    built: list[Model] = []
    gate = threading.Barrier(2)

    def loader(spec):
        time.sleep(0.05)  # the other thread arrives while this one loads
        built.append(Model())
        return built[-1]

    lm = LazyLM("x", loader=loader)
    results = []

    def use() -> None:
        gate.wait()
        results.append(lm.generate(["a"]))

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert results == [["ok"], ["ok"]] and len(built) == 1 and lm.loaded


def test_close_before_after_and_twice() -> None:
    calls = []
    lm = LazyLM("x", loader=lambda spec: calls.append(spec) or Model())
    lm.close()
    lm.close()
    assert calls == [] and not lm.loaded
    with pytest.raises(LMUnavailable, match="closed"):
        lm.generate(["a"])
    model = Model()
    lm = LazyLM("x", loader=lambda spec: model)
    lm.generate(["a"])
    lm.close()
    lm.close()
    assert model.closed == 1
    with pytest.raises(LMUnavailable, match="closed"):
        lm.count_tokens("a")
    shared = LazyLM("x", loader=lambda spec: model, shared=True)
    shared.load()
    shared.close()
    assert model.closed == 1  # its owner closes a shared model


def test_a_failing_loader_raises_each_time_and_may_recover() -> None:
    tries = []

    def loader(spec):
        tries.append(spec)
        if len(tries) < 3:
            raise ValueError(f"unknown LM spec {spec!r}")
        return Model()

    lm = LazyLM("bad:spec", loader=loader)
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown LM spec 'bad:spec'"):
            lm.generate(["a"])
        assert not lm.loaded
    assert lm.generate(["a"]) == ["ok"] and len(tries) == 3


def test_a_bad_spec_raises_clearly_through_make_lm() -> None:
    lm = LazyLM("no-such-kind:whatever")
    for _ in range(2):
        with pytest.raises((ValueError, FileNotFoundError, LMUnavailable)):
            lm.generate(["a"])
    assert not lm.loaded


def test_a_loader_answering_none_or_itself_does_not_hang() -> None:
    lm = LazyLM("x", loader=lambda spec: None)
    with pytest.raises(LMUnavailable, match="returned no model"):
        lm.generate(["a"])
    box: list[LazyLM] = []
    selfish = LazyLM("y", loader=lambda spec: box[0])
    box.append(selfish)
    done: list[BaseException] = []

    def use() -> None:
        try:
            selfish.generate(["a"])
        except BaseException as exc:
            done.append(exc)

    t = threading.Thread(target=use, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "a loader returning its own proxy deadlocked"
    assert isinstance(done[0], LMUnavailable) and "same proxy" in str(done[0])
    a: list[LazyLM] = []
    first = LazyLM("a", loader=lambda spec: LazyLM("b", loader=lambda s: a[0]))
    a.append(first)
    with pytest.raises(LMUnavailable, match="same proxy"):
        first.load()


def test_half_built_proxies_raise_attribute_errors() -> None:
    half = LazyLM.__new__(LazyLM)
    for name in ("_load_lock", "_closed", "spec", "_loading", "__deepcopy__"):
        with pytest.raises(AttributeError):
            getattr(half, name)
    lm = LazyLM("x", loader=lambda spec: Model())
    assert copy.copy(lm).spec == "x"
