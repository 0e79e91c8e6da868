"""The measuring parts of ``sweworld bench throughput`` (:mod:`sweworld.bench.throughput`):
memory of a process tree and of the machine, the step mixes (file operations; execution
commands every backend runs alike), a replay world model that answers with recorded real
outputs, and the two measurements, :func:`measure_sessions` and :func:`measure_steps`.
"""

from __future__ import annotations

import gc
import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweworld.bench.similarity import percentile

__all__ = [
    "FILE_OPS",
    "REAL_BACKENDS",
    "ContainerMemory",
    "docker_executor",
    "exec_action",
    "file_op_action",
    "load_model",
    "machine_available_bytes",
    "measure_sessions",
    "measure_steps",
    "process_tree",
    "record_real_answers",
    "replay_world_lm",
    "tree_cpu_s",
    "tree_pss_bytes",
    "tree_rss_bytes",
    "warmup_action",
]

REAL_BACKENDS = ("local", "docker")
FILE_OPS = "file ops"


# =========================================================================== memory


def process_tree(root: int | None = None) -> list[int]:
    """``root`` (default: this process) and every process under it, by ``/proc``."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, []))
    return out


def _status_kb(pid: int, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_rss_bytes(root: int | None = None) -> int:
    """Resident set size of ``root`` (default: this process) and every process under it.
    Pages shared between them (a library, bash) count once per process."""
    return 1024 * sum(_status_kb(pid, "VmRSS:") for pid in process_tree(root))


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_pss_bytes(root: int | None = None, exclude: int | None = None) -> int:
    """Proportional set size of ``root`` (default: this process) and every process under it
    but ``exclude``'s subtree (pages shared between them are split, not counted twice)."""
    skip = set(process_tree(exclude)) if exclude else set()
    return 1024 * sum(_pss_kb(pid) for pid in process_tree(root) if pid not in skip)


def tree_cpu_s(root: int | None = None, *, reaped: bool = True) -> float:
    """CPU seconds (user + system) of ``root`` and every process under it; with ``reaped``,
    also their reaped children's (the commands that ran and exited)."""
    fields_used = slice(11, 15) if reaped else slice(11, 13)  # utime stime [cutime cstime]
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[fields_used])
        except (OSError, ValueError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def machine_available_bytes() -> int:
    """The machine's ``MemAvailable`` (``/proc/meminfo``): its drop counts every process
    and the kernel's memory, not only this process tree's."""
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return 1024 * int(line.split()[1])
    return 0


class _MemoryProbe:
    """Memory now, to subtract from memory later (both figures, in MB per item)."""

    def __init__(self) -> None:
        gc.collect()
        self.rss = tree_rss_bytes()
        self.available = machine_available_bytes()

    def per_item_mb(self, count: int) -> dict[str, float]:
        gc.collect()
        rss = (tree_rss_bytes() - self.rss) / max(count, 1) / 2**20
        machine = (self.available - machine_available_bytes()) / max(count, 1) / 2**20
        return {"rss_mb_per_session": rss, "machine_mb_per_session": machine}


# =========================================================================== workloads


def _test_file(task: Any) -> str:
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        ids = getattr(task, name, None) or []
        for test_id in ids:
            path = str(test_id).split("::", 1)[0]
            if path.endswith(".py"):
                return path
    return "tests"


def _package(task: Any) -> str:
    return str(task.repo).rsplit("/", 1)[-1].lower().replace("-", "_")


def file_op_action(task: Any, slot: int, step: int) -> str:
    """The ``step``-th file operation of slot ``slot``: view, grep, list, create (a file of
    its own), read; none reaches an executor."""
    test_file = _test_file(task)
    kind = step % 5
    if kind == 0:
        return _tool("view", f"/testbed/{test_file}")
    if kind == 1:
        return f"grep -rn 'def ' /testbed/{test_file} | head -20"
    if kind == 2:
        return "ls -la /testbed"
    if kind == 3:
        text = f"slot {slot} step {step}\n"
        return _tool("create", f"/testbed/bench_notes_{step}.txt", file_text=text)
    return f"head -40 /testbed/{test_file}"


def _tool(command: str, path: str, **params: str) -> str:
    extra = "".join(f"<parameter={k}>{v}</parameter>\n" for k, v in params.items())
    return (
        f"<function=file_editor>\n<parameter=command>{command}</parameter>\n"
        f"<parameter=path>{path}</parameter>\n{extra}</function>"
    )


def exec_action(task: Any, slot: int, step: int) -> str:
    """The ``step``-th execution command of slot ``slot`` (the same for every execution
    backend): a ``python -c`` importing the package, then pytest on a test file of the
    task, alternately; each distinct per slot and step (no cache hit of another's)."""
    if step % 2 == 0:
        code = f"import {_package(task)}; print('slot {slot} step {step}')"
        return f'python -c "{code}"'
    return f"python -m pytest {_test_file(task)} -q -p no:cacheprovider -k 'not zz_{slot}_{step}'"


def warmup_action(real_executor: bool) -> str:
    """The untimed first command of a slot: one that starts the real executor's sandbox or
    container; for the others one that starts the session's sandbox (and asks no model)."""
    return "python -c 'pass'" if real_executor else "true"


_COMMAND_LINE = re.compile(r"<command>\s*\n(?:cwd: [^\n]*\n)?\$ ([^\n]*)", re.S)


def replay_world_lm(answers: dict[tuple[str, str], dict[str, Any]]) -> Any:
    """A replay LM answering an SWT prompt at once: the recorded real answer (stdout,
    stderr, exit code) of the same kind of command on the same target (``("python",
    package)`` / ``("pytest", test file)``), or an empty success when none was recorded."""
    from sweworld.models.replay import ReplayLM

    def answer(messages: list[dict[str, str]]) -> str:
        text = str(messages[-1].get("content", "")) if messages else ""
        found = _COMMAND_LINE.findall(text)
        command = found[-1] if found else ""
        for (kind, target), recorded in answers.items():
            if kind in command and target in command:
                return json.dumps(recorded)
        return json.dumps({"stdout": "", "stderr": "", "exit_code": 0})

    return ReplayLM(answer, name="replay-real-answers")


def record_real_answers(tasks: Sequence[Any], root: Path) -> dict[tuple[str, str], dict]:
    """Run each task's two execution commands once with the LocalExecutor; their outputs
    are what :func:`replay_world_lm` answers."""
    from sweworld.execution.local import LocalExecutor
    from sweworld.sandbox.manager import SessionManager

    answers: dict[tuple[str, str], dict] = {}
    executor = LocalExecutor(timeout=300)
    manager = SessionManager(runtime_root=root / "record", executor=executor)
    try:
        for task in tasks:
            with manager.open(task) as session:
                for step, kind, target in ((0, "python", _package(task)),
                                           (1, "pytest", _test_file(task))):  # fmt: skip
                    out = session.run(exec_action(task, 0, step))
                    answers[(kind, target)] = {
                        "stdout": out.stdout, "stderr": out.stderr, "exit_code": out.exit_code
                    }  # fmt: skip
    finally:
        manager.close_all()
        executor.close()
    return answers


# =========================================================================== measuring


def measure_sessions(tasks: Sequence[Any], live: int, churn: int, root: Path) -> dict[str, Any]:
    """Sessions opened per second up to ``live`` live ones, ``churn`` opened and closed
    while those live, the ``live`` closed; memory per live session (see the module doc)."""
    from sweworld.sandbox.manager import SessionManager

    manager = SessionManager(runtime_root=root / f"sessions-{live}")  # no executor
    try:
        for task in tasks:
            manager.checkout(task)  # the shared base checkout: built once, not timed
        probe = _MemoryProbe()
        sessions = []
        started = time.perf_counter()
        for i in range(live):
            sessions.append(manager.open(tasks[i % len(tasks)]))
        open_s = time.perf_counter() - started
        started = time.perf_counter()
        for session in sessions:
            session.step("true")  # its sandbox server starts
        first_s = time.perf_counter() - started
        time.sleep(0.2)
        memory = probe.per_item_mb(live)
        started = time.perf_counter()
        for i in range(churn):
            manager.open(tasks[i % len(tasks)]).destroy()
        churn_s = time.perf_counter() - started
        started = time.perf_counter()
        for session in sessions:
            session.destroy()
        close_s = time.perf_counter() - started
    finally:
        manager.close_all()
    return {
        "metric": "sessions",
        "backend": "sandbox",
        "concurrency": live,
        "sessions": live,
        "open_per_s": live / open_s if open_s else None,
        "first_command_s": first_s / live,
        "churn": churn,
        "open_close_per_s": churn / churn_s if churn and churn_s else None,
        "close_per_s": live / close_s if close_s else None,
        **memory,
    }


def measure_steps(
    tasks: Sequence[Any],
    backend: str,
    size: int,
    steps: int,
    root: Path,
    *,
    executor: Any = "none",
    lm: Any = None,
    step_timeout_s: float = 300.0,
    outside_memory: Callable[[], tuple[int | None, int]] | None = None,
) -> dict[str, Any]:
    """Steps per second of an :class:`~sweworld.env.pool.EnvPool` of ``size`` episodes in
    lock step for ``steps`` rounds (after one warm-up round); latency and memory
    (``outside_memory``: bytes and count of what the episodes hold outside this process
    tree, e.g. :class:`ContainerMemory`)."""
    from sweworld.env.pool import EnvPool
    from sweworld.sandbox.manager import SessionManager

    execution = backend != FILE_OPS
    action: Callable[[Any, int, int], str] = exec_action if execution else file_op_action
    options: dict[str, Any] = {
        "reward": "none",
        "record": False,
        "max_steps": steps + 2,
        "step_timeout_s": step_timeout_s,
    }
    if lm is not None:
        embedded = backend.startswith("embedded")
        options.update(executor="simulated", lm=lm, batch_wait_s=0.02,
                       max_batch=8 if embedded else 64)  # fmt: skip
    else:
        options["executor"] = executor
    manager = SessionManager(runtime_root=root / f"{re.sub(r'[^a-z0-9]+', '-', backend)}-{size}")
    slot_tasks = [tasks[i % len(tasks)] for i in range(size)]
    probe = _MemoryProbe()
    pool = EnvPool(size=size, manager=manager, **options)
    try:
        started = time.perf_counter()
        pool.reset(slot_tasks)
        reset_s = time.perf_counter() - started
        warm = pool.step([warmup_action(execution and lm is None)] * size)
        first = [o.info.get("latency_s") or 0.0 for o in warm]
        latencies: list[float] = []
        sources: Counter[str] = Counter()
        exit_codes: Counter[str] = Counter()
        errors = 0
        stepping = 0.0
        for step in range(steps):
            actions = [action(t, i, step) for i, t in enumerate(slot_tasks)]
            started = time.perf_counter()
            outcomes = pool.step(actions)
            stepping += time.perf_counter() - started
            for outcome in outcomes:
                latencies.append(float(outcome.info.get("latency_s") or 0.0))
                exit_codes[str(outcome.info.get("exit_code"))] += 1
                errors += bool(outcome.info.get("executor_error") or outcome.info.get("error"))
                for call in outcome.info.get("execution_calls") or []:
                    info = call.get("info") or {}
                    sources[str(info.get("source") or info.get("executor") or backend)] += 1
        memory = probe.per_item_mb(size)
        if outside_memory is not None:
            held, count = outside_memory()
            memory["outside_mb_per_session"] = None if held is None else held / size / 2**20
            memory["outside_processes"] = count
        lm_stats = pool.lm.stats.to_dict() if getattr(pool.lm, "stats", None) else None
    finally:
        pool.close()
        manager.close_all()
    counted = size * steps
    return {
        "metric": "steps",
        "backend": backend,
        "concurrency": size,
        "steps_requested": counted,
        "steps": len(latencies),
        "wall_s": stepping,
        "steps_per_s": len(latencies) / stepping if stepping else None,
        "p50_s": percentile(latencies, 50),
        "p95_s": percentile(latencies, 95),
        "first_step_p50_s": percentile(first, 50),
        "reset_s": reset_s,
        "sources": dict(sources),
        "exit_codes": dict(exit_codes),
        "executor_errors": errors,
        "lm_batches": lm_stats,
        **memory,
    }


# =========================================================================== backends


def docker_executor(
    tasks: Sequence[Any], step_timeout_s: float
) -> tuple[Any, ContainerMemory | None, str | None]:
    """A DockerExecutor when an engine answers and has every task's image, with a
    :class:`ContainerMemory` of the containers it will start; else (None, None, why not)."""
    try:
        import docker
    except ImportError:
        return None, None, "docker: the docker Python package is not installed"
    from sweworld.execution.docker.naming import swebench_image_name

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        return None, None, f"docker: no engine answers ({type(exc).__name__})"
    images: set[str] = set()
    for task in tasks:
        names = [swebench_image_name(task.instance_id),
                 swebench_image_name(task.instance_id, namespace=None)]  # fmt: skip
        present = [name for name in names if _image_present(client, name)]
        if not present:
            client.close()
            return None, None, f"docker: no image {names[0]} (or {names[1]}) on the engine"
        images.update(names)
    from sweworld.execution.docker.executor import DockerExecutor

    memory = ContainerMemory(client, images)
    return DockerExecutor(client=client, timeout=step_timeout_s), memory, None


class ContainerMemory:
    """Resident memory of the containers of ``images`` started since this was made (their
    processes are not under this process): the memory cgroup's ``rss`` (cgroup v1) or
    ``anon`` (v2) of each."""

    def __init__(self, client: Any, images: set[str]):
        self.client = client
        self.images = images
        self.before = self._ids()

    def _ids(self) -> set[str]:
        return {
            c.id
            for c in self.client.containers.list()
            if (c.attrs.get("Config") or {}).get("Image") in self.images
        }

    def __call__(self) -> tuple[int | None, int]:
        """(bytes, containers) of the new containers; bytes None when no cgroup is read."""
        new = self._ids() - self.before
        sizes = [_cgroup_rss(cid) for cid in new]
        known = [size for size in sizes if size is not None]
        return (sum(known) if known else None), len(new)


def _cgroup_rss(container_id: str) -> int | None:
    for path, key in (
        (f"/sys/fs/cgroup/memory/docker/{container_id}/memory.stat", "total_rss"),
        (f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/memory.stat", "anon"),
        (f"/sys/fs/cgroup/docker/{container_id}/memory.stat", "anon"),
    ):
        try:
            with open(path) as handle:
                for line in handle:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def _image_present(client: Any, name: str) -> bool:
    try:
        client.images.get(name)
        return True
    except Exception:
        return False


def load_model(spec: str, tasks: Sequence[Any], root: Path) -> Any:
    """The world model of a ``--models`` entry: ``replay`` (recorded real answers, see
    :func:`replay_world_lm`) or any :func:`~sweworld.world.lm_from_spec` spec, asked once for
    one token so that a model loaded lazily is in memory before the memory baseline (and
    one that cannot answer fails here, not in the middle of a cell)."""
    if spec == "replay":
        try:
            answers = record_real_answers(tasks, root)
        except Exception:
            answers = {}
        return replay_world_lm(answers)
    from sweworld.models import GenerationRequest
    from sweworld.world import lm_from_spec

    lm = lm_from_spec(spec)
    try:
        lm.generate([GenerationRequest([{"role": "user", "content": "hi"}], max_tokens=1)])
    except BaseException:
        lm.close()
        raise
    return lm
