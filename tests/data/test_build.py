"""``sweworld data build-outcome`` and the import options it relies on: shards, repository
filter, records without contexts, the job runner, merging parts split by repository."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sweworld.cli import main
from sweworld.data.build import Job, merge_parts, plan_jobs, run_jobs, state_table
from sweworld.data.importing import import_source, in_shard, parse_shard
from sweworld.data.schema import SWRRecord, SWTRecord
from sweworld.data.store import RecordStore, iter_records, load_split
from tests.conftest import requires_sandbox
from tests.data import toy_source

R2E_FIXTURE = Path(__file__).parent / "importers/fixtures/r2e/fixture.jsonl"


def test_shards_partition_the_units_and_bad_specs_are_errors():
    units = [f"src:inst-{i}" for i in range(200)]
    shards = [(k, 3) for k in range(3)]
    owners = [[s for s in shards if in_shard(u, s)] for u in units]
    assert all(len(o) == 1 for o in owners)  # every unit in exactly one shard
    assert all(sum(in_shard(u, s) for u in units) > 30 for s in shards)  # roughly even
    assert in_shard("anything", None)
    assert parse_shard("1/4") == (1, 4) and parse_shard(None) is None
    for bad in ("4/4", "x/2", "1", "-1/2"):
        with pytest.raises(ValueError):
            parse_shard(bad)


def test_repository_filter_and_shards_split_an_import_without_loss(tmp_path):
    kw = dict(replay=False, progress=False, model="default", workers=1)
    whole = import_source(R2E_FIXTURE, tmp_path / "whole", **kw)
    parts = [import_source(R2E_FIXTURE, tmp_path / f"s{k}", shard=(k, 2), **kw) for k in range(2)]
    assert sum(p["swt"]["total"] for p in parts) == whole["swt"]["total"] > 0
    assert sum(p["swr"]["total"] for p in parts) == whole["swr"]["total"]
    none = import_source(R2E_FIXTURE, tmp_path / "none", repos=["no/such"], **kw)
    assert none["swt"]["total"] == none["swr"]["total"] == 0
    # merging the shards gives the whole import back, once
    merged = merge_parts(tmp_path / "merged", [tmp_path / "s0", tmp_path / "s1"], ("x/y",))
    ids = {r.id for r in iter_records(tmp_path / "whole", "swt")}
    assert {r.id for r in iter_records(tmp_path / "merged", "swt")} == ids
    assert merged["swt"]["total"] == len(ids)


def test_records_without_contexts_keep_what_the_trajectory_gives(tmp_path):
    kw = dict(replay=False, progress=False, model="default", workers=1)
    import_source(R2E_FIXTURE, tmp_path / "bare", modes=(), **kw)
    records = list(iter_records(tmp_path / "bare", "swt"))
    assert records and all(not r.context_oracle and not r.context_blind for r in records)
    assert all(r.command and isinstance(r.exit_code, int) for r in records)


@requires_sandbox
def test_a_replay_without_contexts_still_records_each_state(tmp_path, monkeypatch):
    """The fast path of the build: a replay with no context still gives every execution
    step its workspace state (the diff of the edits made before it)."""
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(tmp_path / "no-cache"))
    src = toy_source(tmp_path)
    out = tmp_path / "out"
    summary = import_source(src, out, progress=False, modes=(), workers=1, step_timeout=1)
    records = {r.step: r for r in iter_records(out, "swt")}
    assert summary["swt"]["state_source"] == {"replay": 5}
    assert "slugify_renamed" in records[2].diff and "+print('repro ran')" in records[4].diff
    assert all(not r.context_oracle and not r.context_blind for r in records.values())
    assert records[4].stdout == "repro ran\n" and records[4].consistent


def _swt(rid: str, repo: str, diff: str = "", state: str = "live") -> SWTRecord:
    return SWTRecord(
        id=rid, source="factory", instance_id=f"{repo}-1", repo=repo, command="python -m pytest",
        stdout="", stderr="", exit_code=1, diff=diff, state_source=state,
    )  # fmt: skip


def test_merge_deduplicates_and_splits_by_repository(tmp_path):
    a, b = tmp_path / "parts/a", tmp_path / "parts/b"
    with RecordStore(a) as store:
        store.add(_swt("1", "pypi/toolz", "diff --git a/x b/x"))
        store.add(_swt("2", "pypi/inflection"))
    with RecordStore(b) as store:
        store.add(_swt("1", "pypi/toolz", "diff --git a/x b/x"))  # the same record again
        store.add(_swt("3", "sympy/sympy", "d", "replay"))
        store.add(_swt("4", "django/django", "", "trajectory"))
        store.add(
            SWRRecord(id="r", source="factory", instance_id="i", repo="pypi/toolz", patch="p",
                      resolved=False)
        )  # fmt: skip
    (tmp_path / "parts/empty").mkdir()  # a part that wrote nothing yet
    out = tmp_path / "out"
    held = ("pypi/inflection",)
    summary = merge_parts(out, sorted((tmp_path / "parts").iterdir()), held)
    assert summary["swt"]["total"] == 4 and summary["swt"]["splits"] == {"train": 3, "test": 1}
    assert [r.repo for r in load_split(out, "swt", "test")] == ["pypi/inflection"]
    rows = {r[0]: r for r in state_table(out, held)}
    assert rows["pypi/toolz"] == ("pypi/toolz", "train", 1, 1, 1, 1)
    assert rows["django/django"][3:5] == (0, 0)  # a fallback record has no state
    assert rows["sympy/sympy"][3:5] == (1, 1)
    # merging again rebuilds the same result (the merged records are derived)
    assert merge_parts(out, [a, b], held)["swt"]["total"] == 4
    assert len((out / "records/swt.jsonl").read_text().splitlines()) == 4


def test_plan_runs_shards_then_one_factory_part_per_library(tmp_path):
    jobs = plan_jobs(
        tmp_path, source=Path("runs.tar.gz"), repos=["psf/requests", "sympy/sympy"],
        libraries=["toolz", "six"], shards=2, contexts="none", max_tasks=5, max_mutants=50,
        wrong_fixes=4,
    )  # fmt: skip
    assert [j.name for j in jobs] == ["import-0", "import-1", "factory-toolz", "factory-six"]
    first = jobs[0].argv
    assert first[first.index("--shard") + 1] == "0/2" and "sympy/sympy" in first
    assert first[first.index("--out") + 1] == str(tmp_path / "parts/import-0")
    toolz = jobs[2].argv
    for flag, value in (("--package", "toolz"), ("--wrong-fixes", "4"), ("--contexts", "none")):
        assert toolz[toolz.index(flag) + 1] == value
    assert "--screen-records" in toolz
    assert [j.name for j in plan_jobs(tmp_path, source=None, repos=["a/b"], libraries=[])] == []


def test_jobs_run_in_parallel_log_and_stop_at_their_limit(tmp_path):
    def job(name: str, code: str) -> Job:
        out = tmp_path / "parts" / name
        return Job(name, [sys.executable, "-c", code], str(out), str(tmp_path / f"{name}.log"), "x")

    jobs = [
        job("ok", "print('hello')"),
        job("fails", "import sys; sys.exit(3)"),
        job("slow", "import time; time.sleep(60)"),
    ]
    done = run_jobs(jobs, parallel=2, timeout=3, echo=lambda _: None)
    by = {j.name: j for j in done}
    assert by["ok"].returncode == 0 and "hello" in Path(by["ok"].log).read_text()
    assert by["fails"].returncode == 3 and not by["fails"].timed_out
    assert by["slow"].timed_out and by["slow"].returncode != 0 and by["slow"].wall_s < 40


def test_build_outcome_cli_dry_run_and_merge_only(tmp_path, capsys):
    out = tmp_path / "b"
    argv = ["data", "build-outcome", "--out", str(out), "--source", str(R2E_FIXTURE)]
    argv += ["--repo-cache", str(tmp_path / "none"), "--libraries", "toolz", "--dry-run"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "make-tasks --package toolz" in printed and "--screen-records" in printed
    assert "not in the repo cache" in printed and " import " not in printed
    with RecordStore(out / "parts/p") as store:
        store.add(_swt("1", "pypi/toolz", "diff"))
    assert main(["data", "build-outcome", "--out", str(out), "--only", "merge"]) == 0
    printed = capsys.readouterr().out
    assert "pypi/toolz" in printed and (out / "swt" / "dataset_dict.json").is_file()
    build = json.loads((out / "build.json").read_text())
    assert build["jobs"] == [] and build["contexts"] == "none"
    started = json.loads((out / "started.json").read_text())
    assert started["command"].startswith(f"sweworld data build-outcome --out {out}")
    assert "--only merge" in started["command"] and started["parts"] == []
    # a merge keeps the record of a build that ran parts
    record = {"command": "sweworld data build-outcome --out X", "started": "t", "parts": ["p"]}
    (out / "started.json").write_text(json.dumps(record))
    assert main(["data", "build-outcome", "--out", str(out), "--only", "merge"]) == 0
    assert json.loads((out / "started.json").read_text()) == record
    capsys.readouterr()
    # the report: finished only when every part the build started wrote its summary
    (out / "logs").mkdir()
    (out / "logs" / "p.log").write_text("$ run\nrecords: swt 1; wall 12.5 s\n$ run\nwall 2.5 s\n")
    report = tmp_path / "report"
    bench = ["bench", "data-outcome", "--build", str(out), "--out", str(report)]
    assert main(bench) == 0
    text = json.loads((report / "report.json").read_text())["description"]
    assert "(not finished: 0 of 1 parts finished, 1 started;" in text
    figures = json.loads((report / "report.json").read_text())["figures"]
    parts = next(f for f in figures if f["title"].startswith("Parts of the build"))
    assert parts["rows"][0][:5] == ["p", 1, 1, 0, 15]  # the two finished runs' walls
    (out / "parts" / "p" / "summary.json").write_text("{}")
    assert main(bench) == 0
    assert "(finished)" in json.loads((report / "report.json").read_text())["description"]
    assert main(["data", "build-outcome", "--out", str(out), "--source", "/no/such"]) == 2


def test_factory_repositories_are_linked_into_one_repo_cache(tmp_path, monkeypatch):
    from sweworld.data.build import link_repos
    from sweworld.sandbox.repos import find_repo_source

    parts = [tmp_path / "parts/factory-six", tmp_path / "parts/factory-six-again"]
    for part in parts:  # bare repositories, as far as the repo cache looks
        (part / "repos/pypi__six.git/objects").mkdir(parents=True)
        (part / "repos/pypi__six.git/HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "parts/import-0").mkdir()  # a part without repositories
    out = tmp_path / "out"
    links = link_repos(out, [*parts, tmp_path / "parts/import-0"])
    assert [link.name for link in links] == ["pypi__six.git"]  # the first copy stays
    assert (out / "repos/pypi__six.git").resolve() == parts[0] / "repos/pypi__six.git"
    assert link_repos(out, parts) == links  # idempotent
    monkeypatch.setenv("SWEWORLD_REPO_CACHE", str(out / "repos"))
    assert find_repo_source("pypi/six").resolve() == (parts[0] / "repos/pypi__six.git")
