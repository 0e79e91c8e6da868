"""What the exact facts buy on real trajectories: how many execution steps they answer
exactly, and how often those answers match what really ran.

Reads the shared mini-swe-agent runs (``mini-swe-agent-gemini3-verified.tar.gz``: per
instance ``trajs/ID/ID.traj.json``, whose ``messages`` alternate the agent's bash command and
the real ``<returncode>`` / ``<output>``). For every step that runs one execution command
(``python ...``, ``pytest ...``, optionally after ``cd DIR &&``, files written with a heredoc
in the same step, or a program fed by a heredoc), it computes the facts twice:

* ``host``: the environment of the interpreter running this script (what the facts assumed
  for every task before issue 9);
* ``task``: the task's own environment description (``Environment.for_task``: the SWE-bench
  harness's Python for the repository and version).

The repositories are not in the shared data. Where a git mirror of the repository is given
(``--mirrors DIR`` holding ``owner+name/repo``), the workspace is the task's base commit
(``swebench_verified_resolved_patches.jsonl.gz`` names it) plus the files the agent wrote
with a heredoc, up to the agent's first other edit (``sed -i``, a redirection, a Python
program that writes, ...): later steps are counted as ``after an unseen edit`` and not
compared. Without a mirror the workspace is only what the trajectory shows (heredoc files
not changed since), and an exact answer that rests on something it cannot show (a script
not written in the trajectory, a module outside the standard library, pytest's collection)
is counted as ``needs repo`` and not compared. Everything else is compared with the
recorded output (stdout and stderr are merged in these records): exit code, output equal
(durations and trailing blanks aside) and line similarity (difflib ratio).

Since issue 19 the facts answer exactly only what paid here (a missing script, a program
that does not compile): the kinds this script still classifies (``python --version``,
import errors, interpreted programs, pytest's empty runs) are no longer produced, in either
environment, and their rows stay empty.

    sweworld bench facts-payoff [--data ../shared/data/mini-swe-agent-gemini3-verified.tar.gz]
                                      [--mirrors /work/.mirror] [--limit N] [--json out.json]
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sweworld.bench.summary import add_report_arguments, write_summary
from sweworld.sandbox.actions import find_bash_blocks
from sweworld.sandbox.executor import ExecutionRequest
from sweworld.tasks import Task
from sweworld.tasks.environment import task_environment
from sweworld.transition.facts import Environment, compute_facts
from sweworld.transition.facts.imports import STDLIB_NAMES
from sweworld.transition.types import WORKDIR, WorkspaceView

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "mini-swe-agent-gemini3-verified.tar.gz"
LITE = ROOT.parent / "shared" / "data" / "swebench_lite.jsonl.gz"
VERIFIED = ROOT.parent / "shared" / "data" / "swebench_verified_resolved_patches.jsonl.gz"

_REPLY = re.compile(r"<returncode>(-?\d+)</returncode>\n<output>\n(.*)</output>\s*$", re.S)
_HEREDOC_TO_FILE = re.compile(
    r"cat\s+(?:>\s*(?P<p1>\S+)\s+)?<<-?\s*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)\s*(?:>\s*(?P<p2>\S+))?"
    r"[^\n]*\n(?P<body>.*?)\n(?P=tag)[ \t]*(?:\n|$)",
    re.S,
)
_HEREDOC_STDIN = re.compile(
    r"^(?P<cmd>python3?(?:\s+-)?)\s*<<-?\s*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)[ \t]*\n"
    r"(?P<body>.*?)\n(?P=tag)[ \t]*$",
    re.S,
)
_READERS = re.compile(r"^(cd \S+ && )?(python3?|pytest|cat|head|tail|grep|ls|nl|sed -n)\b")
_EXEC = re.compile(r"^(python[0-9.]*|pytest|py\.test)$")
_DURATION = re.compile(r" in [\d.]+ ?(s|seconds)\b")


@dataclass
class Step:
    instance: str
    argv: tuple[str, ...]
    cwd: str
    stdin: bytes
    output: str
    code: int
    files: dict[str, str]  # sandbox path -> text, as the trajectory shows them
    repo_dir: Path | None = None  # the real workspace (base + known writes), when a mirror is given


def iter_trajectories(path: Path) -> Iterator[dict]:
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if member.isfile() and member.name.endswith(".traj.json"):
                handle = tar.extractfile(member)
                if handle is not None:
                    yield json.load(handle)


def _norm(path: str, cwd: str) -> str:
    return os.path.normpath(path if path.startswith("/") else f"{cwd}/{path}")


def _parse(command: str, cwd: str) -> tuple[dict[str, str], tuple | None, str]:
    """(files written by heredocs, (argv, stdin) of the one execution command or None, cwd)."""
    written: dict[str, str] = {}
    stdin = b""
    stdin_match = _HEREDOC_STDIN.match(command.strip())
    if stdin_match:
        argv = tuple(stdin_match.group("cmd").split())
        return written, (argv, stdin_match.group("body").encode() + b"\n"), cwd
    rest = command
    for match in _HEREDOC_TO_FILE.finditer(command):
        path = match.group("p1") or match.group("p2")
        if not path:
            return {}, None, cwd
        written[_norm(path.strip("'\""), cwd)] = match.group("body") + "\n"
        rest = rest.replace(match.group(0), "\n", 1)
    if re.search(r"[|<>`]|\$\(", rest.replace("2>&1", "")):
        return written, None, cwd
    parts = [p.strip() for p in re.split(r"&&|;|\n", rest) if p.strip()]
    runs = []
    for part in parts:
        try:
            words = shlex.split(part.replace("2>&1", ""))
        except ValueError:
            return written, None, cwd
        if words and words[0] == "cd" and len(words) == 2 and not runs:
            cwd = _norm(words[1], cwd)
            continue
        runs.append(words)
    if len(runs) != 1 or not runs[0] or not _EXEC.match(os.path.basename(runs[0][0])):
        return written, None, cwd
    return written, (tuple(runs[0]), stdin), cwd


_EDITS = re.compile(
    r"\bsed\s+-i|\bperl\s+-i|\btee\b|\bmv\s|\bcp\s|\brm\s|\btouch\s|\bpatch\b|"
    r"\bgit\s+(apply|checkout|reset|stash|am|restore)\b|>\s*(?!/dev/null|&)\S|"
    r"\.write\(|write_text|write_bytes|os\.remove|os\.rename|shutil\.|unlink\("
)


def _checkout(mirror: Path, commit: str, dest: Path) -> bool:
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(mirror), "archive", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        return False
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return True


def iter_steps(
    trajectories: Iterator[dict],
    counts: Counter,
    bases: dict[str, tuple[str, str]],
    mirrors: Path | None,
    scratch: Path,
) -> Iterator[Step]:
    for trajectory in trajectories:
        messages = trajectory.get("messages") or []
        files: dict[str, str] = {}
        stale: set[str] = set()
        instance = trajectory.get("instance_id", "")
        repo_dir: Path | None = None
        repo, commit = bases.get(instance, ("", ""))
        mirror = mirrors / repo.replace("/", "+") / "repo" if mirrors and repo else None
        if mirror is not None and mirror.is_dir():
            repo_dir = scratch / instance
            if not _checkout(mirror, commit, repo_dir):
                counts["instances: base commit not in the mirror"] += 1
                repo_dir = None
            else:
                counts["instances with their repository"] += 1
        diverged = False
        for index, message in enumerate(messages[:-1]):
            if message.get("role") != "assistant" or not isinstance(message.get("content"), str):
                continue
            blocks = find_bash_blocks(message["content"])
            if len(blocks) != 1:
                continue
            command = blocks[0]
            counts["steps"] += 1
            runs_python = bool(re.search(r"(^|[\s;&(])(python[0-9.]*|pytest|py\.test)\b", command))
            counts["execution steps"] += runs_python
            written, run, cwd = _parse(command, WORKDIR)
            if repo_dir is not None and not diverged:
                rest = _HEREDOC_TO_FILE.sub("\n", command).replace("2>&1", "")
                bodies = "".join(m.group("body") for m in _HEREDOC_STDIN.finditer(command))
                program = " ".join(run[0]) if run else ""
                if _EDITS.search(rest) or _EDITS.search(bodies + program):
                    diverged = True  # what the workspace holds from here on is not known
                for path, text in written.items():
                    if path.startswith(WORKDIR + "/"):
                        target = repo_dir / path[len(WORKDIR) + 1 :]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_text(text)
            for path in files:
                mentioned = path not in written and os.path.basename(path) in command
                if mentioned and not _READERS.match(command.strip()):
                    stale.add(path)  # changed by sed, a script, ...: its text is unknown
            files.update(written)
            stale -= set(written)
            reply = messages[index + 1].get("content")
            if run is None:
                counts["execution steps: not one plain command" if runs_python else "other"] += 1
                continue
            match = _REPLY.match(reply) if isinstance(reply, str) else None
            if match is None:
                counts["execution steps: output truncated in the record"] += 1
                continue
            counts["execution steps: evaluated shape"] += 1
            if repo_dir is not None and diverged:
                counts["execution steps: after an unseen edit (with repository)"] += 1
                continue
            argv, stdin = run
            known = {p: t for p, t in files.items() if p not in stale}
            yield Step(
                instance, argv, cwd, stdin, match.group(2), int(match.group(1)), known, repo_dir
            )


def _bases() -> dict[str, tuple[str, str]]:
    """instance -> (repo, base commit), from the shared SWE-bench Verified rows."""
    if not VERIFIED.is_file():
        return {}
    with gzip.open(VERIFIED, "rt") as handle:
        return {r["instance_id"]: (r["repo"], r["base_commit"]) for r in map(json.loads, handle)}


def _lite_versions() -> dict[str, str]:
    if not LITE.is_file():
        return {}
    with gzip.open(LITE, "rt") as handle:
        return {r["instance_id"]: r["version"] for r in map(json.loads, handle) if r.get("version")}


def _kind(facts) -> str:
    info = facts.command
    if facts.hint is not None:
        return "hint"
    if info.kind == "version":
        return "python --version"
    if info.kind == "pytest":
        if facts.missing_files:
            return "pytest: missing file"
        if facts.exact is not None and facts.exact.exit_code == 5:
            return "pytest: nothing selected"
        if facts.exact is not None and facts.exact.exit_code == 4:
            return "pytest: node id not found"
        return "pytest: collect-only"
    if info.error:
        return "python: usage error"
    if facts.missing_files:
        return "python: missing script"
    if facts.syntax_errors:
        return "python: syntax error"
    if facts.missing_imports:
        return "python: missing module" if info.kind == "python_module" else "python: import error"
    if info.kind == "python_module":
        return "python -m: package without __main__"
    return "python: program run by the interpreter"


def _needs_repo(facts, step: Step) -> bool:
    """Whether the exact answer rests on what the trajectory cannot show."""
    if step.repo_dir is not None:
        return False  # the workspace is the real one
    info = facts.command
    if info.kind == "pytest" or info.kind == "python_module":
        return True  # collection, conftest, config, the package: the repository's
    if facts.missing_files:
        return True  # not written in the trajectory, but the repository may have it
    if info.kind == "python_script" and _norm(info.script or "", step.cwd) not in step.files:
        return True
    for missing in facts.missing_imports:
        if missing.module.split(".")[0] not in STDLIB_NAMES:
            return True  # the repository's package or an installed dependency
    return False


def _clean(text: str) -> str:
    lines = [_DURATION.sub(" in X", line.rstrip()) for line in text.splitlines()]
    lines = [re.sub(r"=+ (.*?) =+$", r"= \1 =", line) for line in lines]
    return "\n".join(lines).strip("\n")


def evaluate(steps: Iterator[Step], versions: dict[str, str], limit: int | None) -> dict:
    """Facts for every step, in the host's and in the task's environment, compared."""
    results: dict[str, dict] = {"host": defaultdict(Counter), "task": defaultdict(Counter)}
    per_repo: dict[str, Counter] = defaultdict(Counter)
    examples: dict[str, list] = {"host": [], "task": []}
    totals: Counter = Counter()
    host_env = Environment()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for number, step in enumerate(steps):
            if limit is not None and number >= limit:
                break
            totals["compared steps"] += 1
            totals["compared steps with the repository"] += step.repo_dir is not None
            root = step.repo_dir or base / f"w{number}"
            if step.repo_dir is None:
                root.mkdir()
                for path, text in step.files.items():
                    if path.startswith(WORKDIR + "/"):
                        target = root / path[len(WORKDIR) + 1 :]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_text(text)
            (base / f"t{number}").mkdir()
            view = WorkspaceView(root, tmp=base / f"t{number}", base=root, cwd=step.cwd)
            repo = step.instance.rsplit("-", 1)[0].replace("__", "/")
            row = {
                "instance_id": step.instance,
                "repo": repo,
                "version": versions.get(step.instance),
            }
            task = Task.from_row(row)
            request = ExecutionRequest(
                argv=step.argv, cwd=step.cwd, stdin=step.stdin, task=task, workspace=root, base=root
            )
            for name, env in (("host", host_env), ("task", None)):
                facts = compute_facts(request, view, env=env)
                if name == "task":
                    where = "with repository" if step.repo_dir is not None else "trajectory only"
                    totals[f"command kind: {facts.command.kind} ({where})"] += 1
                    if facts.command.kind == "pytest" and step.repo_dir is not None:
                        totals["pytest with repository: collection exact"] += bool(
                            facts.collection_exact
                        )
                if facts.exact is None and facts.hint is None:
                    continue
                kind = _kind(facts)
                counter = results[name][kind]
                counter["answered"] += 1
                if _needs_repo(facts, step):
                    counter["needs repo"] += 1
                    continue
                counter["compared"] += 1
                if facts.hint is not None:
                    said, code = facts.hint, 2
                else:
                    said = facts.exact.stdout + facts.exact.stderr
                    code = facts.exact.exit_code
                same_code = code == step.code
                same_text = _clean(said) == _clean(step.output)
                ratio = difflib.SequenceMatcher(
                    None, _clean(said).splitlines(), _clean(step.output).splitlines()
                ).ratio()
                counter["exit code right"] += same_code
                counter["output equal"] += same_text
                counter["right"] += same_code and same_text
                counter["similarity x1000"] += int(ratio * 1000)
                per_repo[f"{repo} ({name})"]["compared"] += 1
                per_repo[f"{repo} ({name})"]["right"] += same_code and same_text
                if not (same_code and same_text) and len(examples[name]) < 40:
                    examples[name].append(
                        {"instance": step.instance, "kind": kind, "argv": list(step.argv),
                         "said": said[-400:], "real": step.output[-400:], "code": [code, step.code]}
                    )  # fmt: skip
            env_desc = task_environment(task)
            totals[f"task python known: {env_desc.python_known}"] += 1
    return {"results": results, "per_repo": per_repo, "totals": totals, "wrong": examples}


def _row(kind: str, c: Counter) -> str:
    sim = c["similarity x1000"] / c["compared"] / 1000 if c["compared"] else 0.0
    cells = [c[k] for k in ("answered", "needs repo", "compared", "exit code right")]
    cells += [c["output equal"], c["right"]]
    return f"{kind:40s} " + " ".join(f"{n:8d}" for n in cells) + f" {sim:8.2f}"


def _print(report: dict, counts: Counter, seconds: float) -> None:
    print(f"# facts payoff on real trajectories ({platform.python_version()} host)")
    for key in sorted(counts):
        print(f"{key:60s} {counts[key]:6d}")
    for key in sorted(report["totals"]):
        print(f"{key:60s} {report['totals'][key]:6d}")
    names = ("answered", "needs repo", "compared", "code ok", "equal", "right", "sim")
    header = f"{'kind':40s} " + " ".join(f"{n:>8s}" for n in names)
    for name in ("host", "task"):
        print(f"\n## environment: {name}\n{header}")
        total: Counter = Counter()
        for kind, c in sorted(report["results"][name].items()):
            total.update(c)
            print(_row(kind, c))
        print(_row("all", total))
    print("\n## per repository (environment): compared / right")
    for repo, c in sorted(report["per_repo"].items()):
        print(f"{repo:50s} {c['compared']:6d} {c['right']:6d}")
    for name in ("host", "task"):
        print(f"\n## some wrong exact answers ({name})")
        for case in report["wrong"][name][:6]:
            print(json.dumps(case)[:600])
    print(f"\n{seconds:.1f}s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sweworld bench facts-payoff``."""
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="mini-swe-agent trajectories (.tar.gz)"
    )
    parser.add_argument("--limit", type=int, default=None, help="compare at most N steps")
    parser.add_argument(
        "--mirrors", type=Path, default=None, help="folder of git mirrors: owner+name/repo"
    )
    add_report_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Run ``sweworld bench facts-payoff``."""
    if not args.data.is_file():
        print(f"no trajectories at {args.data}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        steps = iter_steps(
            iter_trajectories(args.data), counts, _bases(), args.mirrors, Path(scratch)
        )
        report = evaluate(steps, _lite_versions(), args.limit)
    _print(report, counts, time.perf_counter() - started)
    result = json.loads(json.dumps({"counts": counts, **report}, default=dict))
    write_summary(args, "facts-payoff", result, title="What the exact facts pay")
    return 0
