"""Tests for sweworld.tasks.loaders: files, saved datasets, the hub (never reached)."""

from __future__ import annotations

import gzip
import json
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

from sweworld.tasks import (
    HubUnavailableError,
    MissingDependencyError,
    Task,
    TaskLoadError,
    TaskNotFoundError,
    get_task,
    iter_json_lines,
    iter_tasks,
    load_tasks,
    read_json_lines,
)
from sweworld.tasks import loaders as loaders_module


def _rows(n: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "repo": "toy/calc",
            "instance_id": f"toy__calc-{i}",
            "base_commit": "0" * 40,
            "patch": "",
            "test_patch": "",
            "problem_statement": f"bug {i}",
            "FAIL_TO_PASS": json.dumps([f"tests/test_calc.py::test_{i}"]),
            "PASS_TO_PASS": "[]",
        }
        for i in range(n)
    ]


def _write_jsonl(path: Path, rows: list[Any], *, gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------
# Shared data
# ------------------------------------------------------------------------------------------


def test_load_swebench_lite(lite_path: Path) -> None:
    tasks = load_tasks(lite_path)
    assert len(tasks) == 290
    assert len({t.instance_id for t in tasks}) == 290
    assert all(t.source == "swebench" and t.FAIL_TO_PASS for t in tasks)
    assert len(load_tasks(lite_path, limit=5)) == 5
    task = get_task(lite_path, "django__django-15202")
    assert task.repo == "django/django"
    assert task.test_files() == ["tests/forms_tests/field_tests/test_urlfield.py"]


def test_load_verified_resolved_patches(verified_path: Path) -> None:
    tasks = load_tasks(verified_path)
    assert len(tasks) == 402
    assert all(t.patch and t.base_commit and "resolved_by" in t.extra for t in tasks)


def test_get_task_suggests_near_matches(lite_path: Path) -> None:
    with pytest.raises(TaskNotFoundError) as info:
        get_task(lite_path, "django__django-1520")
    message = str(info.value)
    assert "no task 'django__django-1520'" in message and "(290 tasks)" in message
    assert "did you mean" in message and "'django__django-15202'" in message
    assert isinstance(info.value, KeyError)


# ------------------------------------------------------------------------------------------
# File formats
# ------------------------------------------------------------------------------------------


def test_jsonl_and_gz(tmp_path: Path) -> None:
    plain = _write_jsonl(tmp_path / "t.jsonl", _rows())
    packed = _write_jsonl(tmp_path / "t.jsonl.gz", _rows(), gz=True)
    assert [t.instance_id for t in load_tasks(plain)] == [
        "toy__calc-0",
        "toy__calc-1",
        "toy__calc-2",
    ]
    assert load_tasks(packed) == load_tasks(plain)
    assert load_tasks(str(plain), limit=2)[1].FAIL_TO_PASS == ["tests/test_calc.py::test_1"]
    assert load_tasks(plain, limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        load_tasks(plain, limit=-1)
    # Blank lines are skipped.
    spaced = tmp_path / "spaced.jsonl"
    spaced.write_text("\n" + json.dumps(_rows(1)[0]) + "\n\n", encoding="utf-8")
    assert len(load_tasks(spaced)) == 1


def test_iter_tasks_is_lazy(tmp_path: Path) -> None:
    path = tmp_path / "lazy.jsonl"
    path.write_text(json.dumps(_rows(1)[0]) + "\n{not json\n", encoding="utf-8")
    iterator = iter_tasks(path)
    assert next(iterator).instance_id == "toy__calc-0"
    with pytest.raises(TaskLoadError):
        next(iterator)
    assert [t.instance_id for t in iter_tasks(path, limit=1)] == ["toy__calc-0"]


def test_json_list_dict_and_single_row(tmp_path: Path) -> None:
    rows = _rows()
    (tmp_path / "list.json").write_text(json.dumps(rows), encoding="utf-8")
    keyed = {r["instance_id"]: {k: v for k, v in r.items() if k != "instance_id"} for r in rows}
    (tmp_path / "keyed.json").write_text(json.dumps(keyed, indent=2), encoding="utf-8")
    (tmp_path / "one.json").write_text(json.dumps(rows[1]), encoding="utf-8")
    with gzip.open(tmp_path / "list.json.gz", "wt", encoding="utf-8") as handle:
        json.dump(rows, handle)
    expected = load_tasks(tmp_path / "list.json")
    assert [t.instance_id for t in expected] == [r["instance_id"] for r in rows]
    assert load_tasks(tmp_path / "keyed.json") == expected
    assert load_tasks(tmp_path / "list.json.gz") == expected
    assert load_tasks(tmp_path / "one.json") == [expected[1]]


def test_folder_of_files(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    _write_jsonl(folder / "b.jsonl", _rows(3)[2:])
    (folder / "a.json").write_text(json.dumps(_rows(2)), encoding="utf-8")
    (folder / "README.md").write_text("not a task file", encoding="utf-8")
    ids = [t.instance_id for t in load_tasks(folder)]
    assert ids == ["toy__calc-0", "toy__calc-1", "toy__calc-2"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskLoadError, match="no task files"):
        load_tasks(empty)


def test_source_format_override(tmp_path: Path, swesmith_row: dict) -> None:
    row = {k: v for k, v in swesmith_row.items() if k not in ("image_name",)}
    row["instance_id"] = "oauthlib__oauthlib-1"  # looks like SWE-bench now
    row["repo"] = "oauthlib/oauthlib"
    path = _write_jsonl(tmp_path / "smith.jsonl", [row])
    assert load_tasks(path)[0].source == "swebench"
    forced = load_tasks(path, source_format="swesmith")[0]
    assert forced.source == "swesmith"
    assert forced.setup_patch == row["patch"] and forced.patch != row["patch"]


def test_mixed_sources_in_one_file(tmp_path: Path, swesmith_row: dict, r2e_row: dict) -> None:
    path = _write_jsonl(tmp_path / "mixed.jsonl", [_rows(1)[0], swesmith_row, r2e_row])
    assert [t.source for t in load_tasks(path)] == ["swebench", "swesmith", "r2egym"]
    # to_row output loads back to the same tasks.
    tasks = load_tasks(path)
    again = _write_jsonl(tmp_path / "again.jsonl", [t.to_row() for t in tasks])
    assert load_tasks(again) == tasks


# ------------------------------------------------------------------------------------------
# Errors name the file and the line
# ------------------------------------------------------------------------------------------


def test_bad_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_rows(1)[0]) + "\n{oops\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"bad\.jsonl line 2: invalid JSON"):
        load_tasks(path)
    path.write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"line 1: expected a JSON object per line, got list"):
        load_tasks(path)


def test_deeply_nested_json_is_a_load_error(tmp_path: Path) -> None:
    """RecursionError escaped the one JSON Lines reader (task files, replay files:
    ``make_lm("replay:FILE")`` printed a traceback) and the JSON file reader."""
    from sweworld.models import make_lm

    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(_rows(1)[0]) + "\n" + deep + "\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"deep\.jsonl line 2: invalid JSON \(nested"):
        load_tasks(path)
    with pytest.raises(ValueError, match=r"deep\.jsonl line 2: invalid JSON"):
        make_lm(f"replay:{path}")
    whole = tmp_path / "deep.json"
    whole.write_text(deep, encoding="utf-8")
    with pytest.raises(TaskLoadError, match="nested too deeply"):
        load_tasks(whole)


def test_invalid_row_names_file_line_and_field(tmp_path: Path) -> None:
    rows = _rows(3)
    rows[2]["PASS_TO_PASS"] = "test_a test_b"
    path = _write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.raises(TaskLoadError) as info:
        load_tasks(path)
    message = str(info.value)
    assert "rows.jsonl line 3" in message
    assert "toy__calc-2" in message
    assert "PASS_TO_PASS" in message


def test_bad_json_file_names_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"instance_id": "a",\n  oops\n]', encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"broken\.json line 3 column 3: invalid JSON"):
        load_tasks(path)
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(TaskLoadError, match=r"item 0: expected an object"):
        load_tasks(path)
    path.write_text('"just a string"', encoding="utf-8")
    with pytest.raises(TaskLoadError, match="expected a list of task rows"):
        load_tasks(path)


def test_missing_and_unsupported_sources(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not an existing file or folder"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="hub datasets are named"):
        load_tasks("nope")
    odd = tmp_path / "tasks.csv"
    odd.write_text("a,b\n", encoding="utf-8")
    with pytest.raises(TaskLoadError, match="unsupported file type"):
        load_tasks(odd)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "t.jsonl.gz", _rows(50), gz=True)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TaskLoadError, match="cannot read"):
        load_tasks(path)


# ------------------------------------------------------------------------------------------
# Parquet and datasets
# ------------------------------------------------------------------------------------------


def test_parquet(tmp_path: Path, swesmith_row: dict) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = _rows(3)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    tasks = load_tasks(tmp_path / "t.parquet")
    assert [t.instance_id for t in tasks] == [r["instance_id"] for r in rows]
    # SWE-smith publishes test lists as lists: they survive parquet.
    pq.write_table(pa.Table.from_pylist([swesmith_row]), tmp_path / "smith.parquet")
    (task,) = load_tasks(tmp_path / "smith.parquet")
    assert task.source == "swesmith"
    assert task.FAIL_TO_PASS == ["tests/test_common.py::ParamsFromDictTest::test_add_params"]
    bad = [rows[0], {**rows[1], "instance_id": ""}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(TaskLoadError, match=r"bad\.parquet row 1.*instance_id"):
        load_tasks(tmp_path / "bad.parquet")


def test_parquet_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'sweworld\[data\]'"):
        load_tasks(path)


def test_save_to_disk_dataset_and_dict(tmp_path: Path, r2e_row: dict) -> None:
    datasets = pytest.importorskip("datasets")
    rows = _rows(3)
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "single"))
    assert [t.instance_id for t in load_tasks(tmp_path / "single")] == [
        r["instance_id"] for r in rows
    ]
    both = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([r2e_row]),
            "test": datasets.Dataset.from_list(rows[:2]),
        }
    )
    both.save_to_disk(str(tmp_path / "dict"))
    assert len(load_tasks(tmp_path / "dict")) == 2  # "test" by default
    (train,) = load_tasks(tmp_path / "dict", split="train")
    assert train.source == "r2egym" and train.repo == "aio-libs/aiohttp"
    with pytest.raises(TaskLoadError, match="no split 'dev'; available: train, test"):
        load_tasks(tmp_path / "dict", split="dev")
    datasets.DatasetDict(
        {"a": datasets.Dataset.from_list(rows), "b": datasets.Dataset.from_list(rows)}
    ).save_to_disk(str(tmp_path / "ab"))
    with pytest.raises(TaskLoadError, match=r"several splits \(a, b\); pass split="):
        load_tasks(tmp_path / "ab")


# ------------------------------------------------------------------------------------------
# Hub (never contacted)
# ------------------------------------------------------------------------------------------


def _fake_datasets(calls: list[tuple[str, str]], rows: list[dict]) -> types.ModuleType:
    module = types.ModuleType("datasets")

    def load_dataset(name: str, split: str) -> list[dict]:
        calls.append((name, split))
        return rows

    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    return module


def test_hub_unreachable_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(calls, _rows()))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    # An endpoint nothing listens on: the probe fails at once, the hub is never called.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match=r"cannot reach the Hugging Face hub") as info:
        load_tasks("princeton-nlp/SWE-bench_Lite")
    assert time.monotonic() - start < 10
    assert "HF_DATASETS_OFFLINE=1" in str(info.value)
    assert calls == []


def test_hub_load_uses_split(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(calls, _rows(2)))
    monkeypatch.setattr(loaders_module, "_hub_reachable", lambda timeout=3.0: True)
    tasks = load_tasks("princeton-nlp/SWE-bench_Lite")
    assert calls == [("princeton-nlp/SWE-bench_Lite", "test")]
    assert [t.instance_id for t in tasks] == ["toy__calc-0", "toy__calc-1"]
    load_tasks("SWE-Gym/SWE-Gym", split="train", source_format="swegym")
    assert calls[-1] == ("SWE-Gym/SWE-Gym", "train")
    # Offline mode skips the probe and lets datasets use its cache.
    monkeypatch.setattr(loaders_module, "_hub_reachable", lambda timeout=3.0: False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert len(load_tasks("princeton-nlp/SWE-bench_Lite")) == 2


def test_hub_errors_are_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("datasets")

    def load_dataset(name: str, split: str) -> None:
        raise FileNotFoundError(f"Dataset '{name}' doesn't exist on the Hub")

    module.load_dataset = load_dataset  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", module)
    monkeypatch.setattr(loaders_module, "_hub_reachable", lambda timeout=3.0: True)
    with pytest.raises(TaskLoadError, match=r"cannot load hub dataset 'no/such'.*doesn't exist"):
        load_tasks("no/such")


def test_hub_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependencyError, match=r"'datasets' package.*sweworld\[data\]"):
        load_tasks("princeton-nlp/SWE-bench_Lite")


def test_existing_path_wins_over_hub_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "owner" / "name"
    folder.mkdir(parents=True)
    _write_jsonl(folder / "tasks.jsonl", _rows(1))
    monkeypatch.setattr(
        loaders_module, "_hub_reachable", lambda timeout=3.0: pytest.fail("hub probed")
    )
    assert [t.instance_id for t in load_tasks("owner/name")] == ["toy__calc-0"]
    # A path-like name that does not exist is not sent to the hub either.
    with pytest.raises(FileNotFoundError):
        load_tasks("owner/missing.jsonl")


def test_task_objects_are_models(tmp_path: Path) -> None:
    (task,) = load_tasks(_write_jsonl(tmp_path / "x.jsonl", _rows(1)))
    assert isinstance(task, Task)
    assert task.model_dump()["FAIL_TO_PASS"] == ["tests/test_calc.py::test_0"]


def test_one_json_lines_reader_for_files_and_streams(tmp_path: Path) -> None:
    text = '{"a": 1}\n\n"x\u2028y"\n[1, 2]\n'  # U+2028 is not a line break here
    assert list(read_json_lines(text.split("\n"), "<stdin>")) == [
        ("<stdin> line 1", {"a": 1}),
        ("<stdin> line 3", "x\u2028y"),
        ("<stdin> line 4", [1, 2]),
    ]
    path = tmp_path / "rows.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(text)
    assert [value for _, value in iter_json_lines(path)] == [{"a": 1}, "x\u2028y", [1, 2]]
    with pytest.raises(ValueError, match=r"<stdin> line 2: invalid JSON"):
        list(read_json_lines(["1", "{oops"], "<stdin>", error=ValueError))
    with pytest.raises(TaskLoadError, match="cannot read"):
        list(iter_json_lines(tmp_path / "absent.jsonl"))
