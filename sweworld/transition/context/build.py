""":func:`build_context`, with the rendering of the computed facts and of the session's history."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from typing import Any

from sweworld.models.budget import (
    LineTokens,
    Part,
    fit_parts,
    patch_parts,
    truncate_chars,
    truncate_text,
    waterfill,
)
from sweworld.tasks.fields import test_list
from sweworld.transition.context.config import (
    CONTEXT_FIELDS,
    CONTEXT_VERSION,
    ContextConfig,
    HistoryItem,
    SWTContext,
)
from sweworld.transition.context.executed import Collector, decode_source
from sweworld.transition.context.related import changed_lines, related_files, related_text
from sweworld.transition.types import WORKDIR, WorkspaceView

# ------------------------------------------------------------------------------------------
# Facts and history
# ------------------------------------------------------------------------------------------

_FACT_NAMES = (
    "exact",
    "syntax_errors",
    "missing_imports",
    "missing_files",
    "collected_tests",
    "executed_files",
)


def _fact_value(value: Any) -> str:
    if hasattr(value, "stdout") and hasattr(value, "exit_code"):
        out = getattr(value, "stdout", "") or ""
        err = getattr(value, "stderr", "") or ""
        parts = [f"exit_code={value.exit_code}"]
        if out:
            parts.append("stdout=" + repr(out[:200]))
        if err:
            parts.append("stderr=" + repr(err[:200]))
        return ", ".join(parts)
    if is_dataclass(value) and not isinstance(value, type):
        items = [(f.name, getattr(value, f.name)) for f in fields(value)]
        return ", ".join(f"{k}={v!r}" for k, v in items if v not in (None, "", (), []))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v!r}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    return str(value)


def _render_facts(facts: Any) -> str:
    if facts is None:
        return ""
    if is_dataclass(facts) and not isinstance(facts, type):
        names = [f.name for f in fields(facts) if not f.name.startswith("_")]
    else:
        names = [n for n in _FACT_NAMES if hasattr(facts, n)]
    lines: list[str] = []
    for name in names:
        value = getattr(facts, name, None)
        if value is None or value is False or value == "" or callable(value):
            continue
        if isinstance(value, set | frozenset):
            value = sorted(value, key=str)
        if isinstance(value, list | tuple):
            if not value:
                continue
            lines.append(f"{name} ({len(value)}):")
            lines.extend(f"  - {_fact_value(v)}" for v in value)
        elif isinstance(value, dict):
            if not value:
                continue
            lines.append(f"{name}:")
            lines.extend(
                f"  {k}: {_fact_value(v)}"
                for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            )
        else:
            lines.append(f"{name}: {_fact_value(value)}")
    return "\n".join(lines)


def _facts_executed_files(facts: Any) -> list[str]:
    raw = getattr(facts, "executed_files", ()) if facts is not None else ()
    out = []
    for item in raw or ():
        path = item if isinstance(item, str) else getattr(item, "path", None)
        if isinstance(path, str) and path:
            out.append(path)
    return out


def _history_items(history: Iterable[Any], steps: int) -> list[HistoryItem]:
    items: list[HistoryItem] = []
    for item in history:
        if isinstance(item, HistoryItem):
            items.append(item)
        elif isinstance(item, dict):
            items.append(
                HistoryItem(
                    str(item.get("command", "")),
                    int(item.get("exit_code", 0) or 0),
                    str(item.get("output", "")),
                )
            )
        else:
            items.append(
                HistoryItem(
                    str(getattr(item, "command", "")),
                    int(getattr(item, "exit_code", 0) or 0),
                    str(getattr(item, "output", "")),
                )
            )
    return items[-steps:] if steps > 0 else []


# ------------------------------------------------------------------------------------------
# build_context
# ------------------------------------------------------------------------------------------


def build_context(
    request: Any,
    view: WorkspaceView,
    *,
    task: Any = None,
    history: Iterable[Any] = (),
    facts: Any = None,
    config: ContextConfig | None = None,
) -> SWTContext:
    """The SWT context for one execution command (see the module docstring).

    ``task`` defaults to ``request.task``; ``history`` holds :class:`HistoryItem` (or dicts
    with ``command``, ``exit_code``, ``output``) oldest first; ``facts`` is the result of
    ``sweworld.transition.facts.compute_facts`` (read duck-typed) or None.
    """
    config = config or ContextConfig()
    tok = LineTokens(config.counter)
    task = task if task is not None else getattr(request, "task", None)
    oracle = config.mode == "oracle"
    cwd = getattr(request, "cwd", None) or WORKDIR

    executed = Collector(request, view, config).collect(_facts_executed_files(facts))

    diff = view.diff()
    changed = changed_lines(diff)
    rel_files, rel_notes = related_files(view, executed, changed, cwd, config)

    argv = tuple(str(a) for a in getattr(request, "argv", ()))
    command = getattr(request, "command", None) or " ".join(argv)
    env = getattr(request, "env", None) or {}
    env_lines = [f"{k}={v}" for k, v in sorted(env.items(), key=lambda kv: str(kv[0]))]
    env_line_cap = max(config.env_tokens // 2, 16)
    env_text = "\n".join(truncate_chars(line, env_line_cap, tok)[0] for line in env_lines)
    stdin_text = ""
    stdin = bytes(getattr(request, "stdin", b"") or b"")
    if stdin and not executed.stdin_is_script:
        decoded, note = decode_source(stdin)
        stdin_text = decoded if decoded is not None else note

    history_items = _history_items(history, config.history_steps)
    history_parts = [
        Part(f"$ {h.command}\n(exit code {h.exit_code})", h.output.rstrip("\n"), h.command)
        for h in history_items
    ]

    tests_parts: list[Part] = []
    if oracle and task is not None:
        f2p = test_list(task, "FAIL_TO_PASS")
        p2p = test_list(task, "PASS_TO_PASS")
        if f2p:
            tests_parts.append(
                Part("FAIL_TO_PASS (fail before the fix, pass after):", "\n".join(f2p))
            )
        if p2p:
            tests_parts.append(Part("PASS_TO_PASS (pass before and after):", "\n".join(p2p)))

    problem = str(getattr(task, "problem_statement", "") or "").strip("\n")
    builders: dict[str, Callable[[int], tuple[str, int]]] = {
        "problem": lambda b: truncate_text(problem, b, tok),
        "diff": lambda b: fit_parts(patch_parts(diff), b, tok),
        "history": lambda b: fit_parts(history_parts, b, tok),
        "executed_code": lambda b: fit_parts(executed.parts, b, tok),
        "related_code": lambda b: related_text(
            rel_files, rel_notes, executed.idents, b, tok, config.line_numbers
        ),
        "facts": lambda b: truncate_text(_render_facts(facts), b, tok),
        "command": lambda b: truncate_chars(command, b, tok),
        "env": lambda b: truncate_text(env_text, b, tok),
        "stdin": lambda b: truncate_text(stdin_text, b, tok),
    }
    if oracle:
        gold = str(getattr(task, "patch", "") or "")
        test_patch = str(getattr(task, "test_patch", "") or "")
        builders["gold_patch"] = lambda b: fit_parts(patch_parts(gold), b, tok)
        builders["test_patch"] = lambda b: fit_parts(patch_parts(test_patch), b, tok)
        builders["tests"] = lambda b: fit_parts(tests_parts, b, tok)

    names = [n for n in CONTEXT_FIELDS if n in builders]
    results = {n: builders[n](config.budget(n)) for n in names}
    demands = [tok(results[n][0]) for n in names]
    if sum(demands) > config.total_tokens:
        weights = [float(config.budget(n)) for n in names]
        alloc = waterfill(demands, weights, config.total_tokens)
        for _ in range(8):
            for n, a, d in zip(names, alloc, demands, strict=True):
                if a < d:
                    results[n] = builders[n](a)
            demands = [tok(results[n][0]) for n in names]
            over = sum(demands) - config.total_tokens
            if over <= 0:
                break
            alloc = waterfill(demands, weights, config.total_tokens - over)

    truncated = {n: results[n][1] for n in names if results[n][1] > 0}
    values = {n: results[n][0] for n in names}
    return SWTContext(
        command=values["command"],
        cwd=cwd,
        env=values["env"],
        stdin=values["stdin"],
        problem=values["problem"],
        diff=values["diff"],
        executed_code=values["executed_code"],
        related_code=values["related_code"],
        facts=values["facts"],
        history=values["history"],
        gold_patch=values.get("gold_patch", ""),
        test_patch=values.get("test_patch", ""),
        tests=values.get("tests", ""),
        mode=config.mode,
        truncated=truncated,
        version=CONTEXT_VERSION,
    )
