"""The steps ``sweworld bench executors`` replays in every executor's session.

Two sources of steps, both a list of :class:`Step` per task:

- :func:`probe_steps`: a built-in script per task that exercises what an executor must get
  right: the version of Python, the task's FAIL_TO_PASS and PASS_TO_PASS tests at the base
  and after the gold patch (applied with ``git apply``, a file operation), an import of the
  patched module, a non-zero exit, a traceback, a missing module, a script written to
  ``/tmp`` and run from there, piped stdin, a changed working directory, an environment
  variable, and a file written by Python then read by the shell;
- :func:`record_steps`: the execution commands of recorded SWT examples (the data schema's
  :class:`~sweworld.data.schema.SWTRecord`), in the order the episode ran them, each preceded
  (when the workspace changed) by a setup step that resets the workspace to the base and
  applies the record's ``diff``.

A setup step (``measured=False``) is a file operation every session runs alike; it is run
and checked, not compared. Steps are plain text, so one list drives any executor.
"""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "PROBE_LABELS",
    "Step",
    "patched_module",
    "probe_steps",
    "record_steps",
    "test_ids",
]

#: Where setup steps put patches inside a session (its private ``/tmp``).
PATCH_PATH = "/tmp/sweworld_bench.patch"

#: The labels of the probe's measured steps, in order (a task without tests, a gold patch or
#: a Python module leaves the steps that need them out).
PROBE_LABELS = (
    "python_version",
    "tests_f2p_base",
    "tests_p2p_base",
    "tests_f2p_gold",
    "tests_p2p_gold",
    "import_patched_module",
    "nonzero_exit",
    "traceback",
    "missing_module",
    "tmp_script",
    "stdin_piped",
    "cwd_change",
    "env_var",
    "python_writes_file",
)


@dataclass(frozen=True)
class Step:
    """One agent action replayed in every session.

    Attributes:
        index: position in the task's list (the row key is ``instance_id#index``).
        label: what the step exercises (a probe label, or ``record:<id>``).
        command: the shell command the session runs.
        files: ``(path, text)`` written into the session (real file operations) first.
        measured: compared across executors (False: a setup step, run and checked only).
        recorded: the recorded real result (``stdout``, ``stderr``, ``exit_code``) of a
            record's step, else None.
    """

    index: int
    label: str
    command: str
    files: tuple[tuple[str, str], ...] = ()
    measured: bool = True
    recorded: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def kind(self) -> str:
        """The command kind (:func:`sweworld.data.schema.command_kind`), ``setup`` for a
        setup step."""
        from sweworld.data.schema import command_kind

        return command_kind(self.command) if self.measured else "setup"


def test_ids(value: Any) -> list[str]:
    """A task's test list (a list, or a JSON string of one, as SWE-bench rows hold it)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            return []
    return [str(v) for v in value or [] if str(v).strip()]


def patched_module(patch: str) -> str | None:
    """The dotted module of the first Python file a patch changes (``src/`` and ``lib/``
    layouts unwrapped, tests left out), or None."""
    for line in patch.splitlines():
        if not line.startswith("diff --git a/"):
            continue
        path = line.split(" b/", 1)[-1].strip()
        if not path.endswith(".py") or "test" in path.rsplit("/", 1)[-1]:
            continue
        parts = path[: -len(".py")].split("/")
        if parts[0] in ("src", "lib") and len(parts) > 1:
            parts = parts[1:]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() for p in parts):
            return ".".join(parts)
    return None


def _pytest(ids: Sequence[str]) -> str:
    return "python -m pytest -rA -p no:cacheprovider " + " ".join(shlex.quote(t) for t in ids)


def probe_steps(task: Any, *, max_tests: int = 20) -> list[Step]:
    """The built-in probe of ``task`` (see the module doc); at most ``max_tests`` test ids
    per test run (FAIL_TO_PASS first, then PASS_TO_PASS in their listed order)."""
    f2p = test_ids(getattr(task, "FAIL_TO_PASS", None))[:max_tests]
    p2p = test_ids(getattr(task, "PASS_TO_PASS", None))[:max_tests]
    gold = str(getattr(task, "patch", "") or "")
    test_patch = str(getattr(task, "test_patch", "") or "")
    module = patched_module(gold)
    package = module.split(".")[0] if module else None
    package_dir = module.rsplit(".", 1)[0].replace(".", "/") if module and "." in module else None
    steps: list[tuple[str, str, tuple[tuple[str, str], ...], bool]] = []

    def add(label: str, command: str, files: tuple[tuple[str, str], ...] = (), measured=True):
        steps.append((label, command, files, measured))

    if test_patch.strip():
        add("setup:test_patch", f"git apply {PATCH_PATH}", ((PATCH_PATH, test_patch),), False)
    add("python_version", "python --version")
    if f2p:
        add("tests_f2p_base", _pytest(f2p))
    if p2p:
        add("tests_p2p_base", _pytest(p2p))
    if gold.strip():
        add("setup:gold_patch", f"git apply {PATCH_PATH}", ((PATCH_PATH, gold),), False)
        if f2p:
            add("tests_f2p_gold", _pytest(f2p))
        if p2p:
            add("tests_p2p_gold", _pytest(p2p))
    if module:
        add(
            "import_patched_module",
            f"python -c 'import {module} as m; print(m.__name__, len(dir(m)) > 0)'",
        )
    add("nonzero_exit", "python -c 'import sys; print(\"before exit\"); sys.exit(3)'")
    add("traceback", "python -c 'import json; json.loads(\"{not json\")'")
    add("missing_module", "python -c 'import sweworld_no_such_module'")
    script = "import os, sys\n"
    if package:
        script += f"import {package}\nprint({package}.__name__)\n"
    script += "print(os.getcwd(), sys.argv[1:])\n"
    add(
        "tmp_script",
        "cat > /tmp/sweworld_probe.py <<'SWEWORLD_EOF'\n"
        f"{script}SWEWORLD_EOF\n"
        "python /tmp/sweworld_probe.py one 'two words'",
    )
    add(
        "stdin_piped",
        "printf 'alpha\\nbeta\\n' | "
        "python -c 'import sys; print(sys.stdin.read().upper(), end=\"\")'",
    )
    where = package_dir or package or "."
    add("cwd_change", f"(cd {shlex.quote(where)} && python -c 'import os; print(os.getcwd())')")
    add(
        "env_var",
        "SWEWORLD_PROBE=42 python -c 'import os; print(os.environ.get(\"SWEWORLD_PROBE\"))'",
    )
    add(
        "python_writes_file",
        'python -c \'open("/tmp/sweworld_out.txt", "w").write("written by python\\n")\''
        " && cat /tmp/sweworld_out.txt",
    )
    return [
        Step(i, label, cmd, files, measured)
        for i, (label, cmd, files, measured) in enumerate(steps)
    ]


# ------------------------------------------------------------------------------ records


def _record_command(record: Any) -> str:
    command = str(record.command)
    try:
        env = json.loads(record.env) if record.env else {}
    except ValueError:
        env = {}
    if isinstance(env, dict) and env:
        command = (
            " ".join(
                f"{k}={shlex.quote(str(v))}"
                for k, v in sorted(env.items())
                if str(k).isidentifier()
            )
            + " "
            + command
        )
    if record.stdin:
        command = f"{command} <<'SWEWORLD_STDIN'\n{record.stdin.rstrip(chr(10))}\nSWEWORLD_STDIN"
    cwd = str(record.cwd or "/testbed")
    if cwd.rstrip("/") != "/testbed":
        command = f"cd {shlex.quote(cwd)} && {command}"
    return command


#: Paths a recorded diff may carry that are caches, not the agent's work (left out of the
#: replayed state: every executor writes its own, or none).
CACHE_PARTS = (".pytest_cache", "__pycache__", ".mypy_cache", ".egg-info", ".tox")


def without_caches(diff: str) -> str:
    """``diff`` without the sections of files under cache folders (:data:`CACHE_PARTS`)."""
    sections = diff.split("\ndiff --git ")
    kept = []
    for i, section in enumerate(sections):
        head = section.split("\n", 1)[0]
        if any(part in head for part in CACHE_PARTS):
            continue
        kept.append(section if i == 0 else "diff --git " + section)
    text = "\n".join(kept)
    return text if text.endswith("\n") or not text else text + "\n"


def record_steps(records: Iterable[Any]) -> tuple[dict[str, list[Step]], dict[str, Any]]:
    """Per instance id, the steps replaying its SWT records in episode order (``step``,
    then ``call``), and per instance the task row the records carry. A record whose
    workspace ``diff`` differs from the previous one's gets a setup step first: reset the
    workspace to the base (``git checkout`` + ``git clean``) and apply the diff."""
    by_task: dict[str, list[Any]] = defaultdict(list)
    task_rows: dict[str, Any] = {}
    for record in records:
        by_task[record.instance_id].append(record)
        if record.instance_id not in task_rows and record.task:
            task_rows[record.instance_id] = record.task
    out: dict[str, list[Step]] = {}
    for instance, recs in by_task.items():
        recs.sort(key=lambda r: (int(r.step), int(r.call), r.id))
        steps: list[Step] = []
        diff: str | None = None
        for record in recs:
            state = without_caches(record.diff or "")
            if state != diff and not (diff is None and not state):
                reset = "git checkout -q -- . && git clean -qfd"
                if state.strip():
                    steps.append(
                        Step(
                            len(steps),
                            "setup:state",
                            f"{reset} && git apply {PATCH_PATH}",
                            ((PATCH_PATH, state),),
                            False,
                        )
                    )
                else:
                    steps.append(Step(len(steps), "setup:state", reset, (), False))
            diff = state
            recorded = {
                "stdout": record.stdout,
                "stderr": record.stderr,
                "exit_code": int(record.exit_code),
            }
            steps.append(
                Step(len(steps), f"record:{record.id}", _record_command(record), recorded=recorded)
            )
        out[instance] = steps
    return out, task_rows
