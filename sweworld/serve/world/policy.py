"""What a client of the world service may ask for: episode-config overrides, task rows, text.

The world service runs episodes with the configuration its operator chose
(:attr:`ServiceConfig.episode`). A client sends overrides; this module decides which it may
send, by three rules:

- a value equal to the server's own is always accepted (a client that sends its whole
  config);
- any other value needs its key in the operator's allow-list
  (:attr:`ServiceConfig.client_config_keys`, ``--client-config-keys``; the default,
  :data:`DEFAULT_CLIENT_KEYS`, holds the keys that change neither code, models nor what
  the server spends beyond the operator's limits);
- an allowed value is bounded by the server's: a limit may be lowered, never raised or
  removed (``null``); ``mode`` may go from ``oracle`` to ``blind``, not back; ``reward``
  may drop sources (``both`` -> ``swr``/``real`` -> ``none``), not add them; an executor
  is a registered short name (never a dotted path that imports code, never ``NAME:ARG``
  that names a host file); a model is the server's or ``embedded``.

Task rows from clients are data: their repository must be a name
(:func:`~sweworld.sandbox.repos.check_repo_name`) and their ``base_commit`` a commit id,
and error texts shown to clients never name a host folder (:func:`public_text`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from sweworld.env import EpisodeConfig

__all__ = [
    "ALL_CLIENT_KEYS",
    "CODE_KEYS",
    "DEFAULT_CLIENT_KEYS",
    "LIMIT_KEYS",
    "PolicyError",
    "check_base_commit",
    "check_overrides",
    "client_task",
    "finite_everywhere",
    "public_text",
]

#: Every EpisodeConfig field a client may name at all (the rest are the client's own
#: process's business: ``world``, ``world_token``, ``extra``).
ALL_CLIENT_KEYS = frozenset(EpisodeConfig.__dataclass_fields__) - {"extra", "world", "world_token"}
#: Limits a client may lower, never raise nor remove.
LIMIT_KEYS = (
    "max_steps",
    "max_wall_s",
    "step_timeout_s",
    "max_observation_chars",
    "max_action_chars",
    "max_tokens",
)
#: Keys that choose code or models on the server (``--allow-config-executor`` adds them).
CODE_KEYS = frozenset({"executor", "model", "swr_model"})
#: What clients may change on a server started without ``--client-config-keys``: limits
#: (downwards), formats, shaping weights, seeds, and the reward (only to fewer sources).
#: Not ``mode`` (oracle gives the simulator the fix), not the SWR stages or preset (each
#: distinct choice builds its own reward model), not code or models.
DEFAULT_CLIENT_KEYS = frozenset(
    {
        *LIMIT_KEYS,
        "prompt_format",
        "action_format",
        "observation_format",
        "dense",
        "step_penalty",
        "test_weight",
        "score_unsubmitted",
        "end_on_executor_error",
        "record",
        "seed",
        "reward",
    }
)
#: Sources of reward a server's choice includes (a client may keep a subset).
_REWARD_SUBSETS = {
    "both": {"both", "swr", "real", "none"},
    "swr": {"swr", "none"},
    "real": {"real", "none"},
    "none": {"none"},
}
#: The fields of a client's row that must equal the server's task of the same id when
#: the server runs only its own tasks (they decide the workspace and the grading).
TASK_MATCH_FIELDS = ("repo", "base_commit", "setup_patch", "patch", "test_patch",
                     "FAIL_TO_PASS", "PASS_TO_PASS")  # fmt: skip
#: Largest magnitude of a dense-reward weight a client may send.
MAX_WEIGHT = 1000.0
#: Model specs a client may name besides the server's own (no path, no URL).
CLIENT_MODELS = frozenset({"embedded", "embedded:default", "embedded:base"})
_SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")


class PolicyError(ValueError):
    """A client's request the server refuses; ``code`` is the error's machine name,
    ``status`` its HTTP status."""

    def __init__(self, message: str, code: str = "refused", status: int = 422):
        super().__init__(message)
        self.code = code
        self.status = status


def finite_everywhere(value: Any, *, limit: int = 100_000) -> str | None:
    """The path of the first float that is not finite (``Infinity``, ``NaN``: the JSON
    parser accepts both) anywhere in ``value``, or None. Walked without recursion; at most
    ``limit`` items are looked at (a body is bounded anyway)."""
    stack: list[tuple[Any, str]] = [(value, "")]
    seen = 0
    while stack and seen < limit:
        item, where = stack.pop()
        seen += 1
        if isinstance(item, float) and not math.isfinite(item):
            return where or "(value)"
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}" if where else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None


def check_base_commit(base_commit: Any) -> None:
    """A client's ``base_commit`` must be a commit id (7-40 lowercase hex digits): an empty
    one would turn a plain folder into the workspace, anything else is not a commit."""
    if not isinstance(base_commit, str) or not _SHA_RE.fullmatch(base_commit):
        shown = repr(base_commit)[:60]
        raise PolicyError(
            f"task: base_commit must be a commit id (7-40 lowercase hex digits), not {shown}",
            "invalid_task",
        )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_limit(key: str, value: Any, server: Any) -> None:
    if value is None:
        raise PolicyError(f"config: {key} may not be null on this server (a limit is kept)")
    if not _is_number(value) or not math.isfinite(value):
        raise PolicyError(f"config: {key} must be a finite number, not {value!r}", "invalid")
    if server is not None and value > server:
        raise PolicyError(
            f"config: {key}={value!r} is over this server's limit ({server!r}); a client "
            "may lower limits, not raise them"
        )


def _check_executor(value: Any) -> None:
    from sweworld.sandbox.registry import executor_names

    names = executor_names()
    if not isinstance(value, str) or value not in names:
        known = ", ".join(sorted(names))
        raise PolicyError(
            f"config: executor must be one of this server's executor names ({known}); "
            "dotted paths and NAME:ARG specs are refused"
        )


def _check_value(key: str, value: Any, server: Any) -> None:
    """Raise :class:`PolicyError` when an allowed key's ``value`` goes past ``server``'s."""
    if key in LIMIT_KEYS:
        _check_limit(key, value, server)
    elif key == "mode":
        if value != "blind":  # the only value not equal to the server's it may take
            raise PolicyError("config: mode may only be lowered to 'blind' on this server")
    elif key == "reward":
        if value not in _REWARD_SUBSETS.get(server, {server}):
            raise PolicyError(
                f"config: reward {value!r} is not part of this server's reward ({server!r}); "
                "a client may leave sources out, not add them"
            )
    elif key == "executor":
        _check_executor(value)
    elif key in ("model", "swr_model"):
        if value not in CLIENT_MODELS:
            raise PolicyError(
                f"config: {key} must be the server's own or one of {sorted(CLIENT_MODELS)}"
            )
    elif key in ("dense", "score_unsubmitted", "end_on_executor_error", "record"):
        if not isinstance(value, bool):
            raise PolicyError(f"config: {key} must be true or false", "invalid")
    elif key == "swr_stages":
        from sweworld.reward.model import STAGE_NAMES

        if value is not None and (
            not isinstance(value, list) or not all(v in STAGE_NAMES for v in value)
        ):
            raise PolicyError(f"config: swr_stages must be a list of {list(STAGE_NAMES)}")
    elif key in ("step_penalty", "test_weight"):
        if not _is_number(value) or not math.isfinite(value) or abs(value) > MAX_WEIGHT:
            raise PolicyError(f"config: {key} must be a number within +-{MAX_WEIGHT:g}", "invalid")
    elif key == "seed" and (
        not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**63
    ):
        raise PolicyError("config: seed must be an integer in [0, 2**63)", "invalid")


def check_overrides(
    server: EpisodeConfig, overrides: dict[str, Any], allowed: frozenset[str]
) -> EpisodeConfig:
    """The episode config of a client's ``overrides`` on a server whose defaults are
    ``server`` and whose allow-list is ``allowed``; :class:`PolicyError` for anything the
    rules of the module docstring refuse, ``code`` ``invalid`` for a value EpisodeConfig
    itself refuses."""
    if not isinstance(overrides, dict):
        raise PolicyError("config must be an object", "invalid")
    unknown = sorted(str(k)[:40] for k in set(overrides) - ALL_CLIENT_KEYS)
    if unknown:
        raise PolicyError(f"config: unknown or refused option(s) {unknown}", "invalid")
    where = finite_everywhere(overrides)
    if where is not None:
        raise PolicyError(f"config: {where} is not a finite number", "invalid")
    changed = {k: v for k, v in overrides.items() if v != getattr(server, k)}
    refused = sorted(k for k in changed if k not in allowed)
    if refused:
        raise PolicyError(
            f"config: {refused} may not be changed by clients on this server (it allows: "
            f"{', '.join(sorted(allowed)) or 'nothing'}); the operator chooses them"
        )
    for key, value in changed.items():
        _check_value(key, value, getattr(server, key))
    if not changed:
        return server
    try:
        return server.replace(**changed)
    except (ValueError, TypeError) as exc:
        raise PolicyError(f"config: {exc}", "invalid") from None


def client_task(
    row: dict[str, Any] | None,
    instance_id: str | None,
    tasks: dict[str, Any],
    allow_rows: bool,
) -> Any:
    """The :class:`~sweworld.tasks.Task` a request names: ``tasks[instance_id]``, or the
    client's ``row``. Without ``allow_rows`` a row must be one of ``tasks`` (same id, same
    :data:`TASK_MATCH_FIELDS`; the server's task is used). With it, the row is data: its
    repository a name (resolved only in the repo cache), its ``base_commit`` a commit id."""
    from sweworld.env import coerce_task
    from sweworld.sandbox.repos import RepoError, check_repo_name

    if (row is None) == (instance_id is None):
        raise PolicyError("give exactly one of task (a row) or instance_id", "invalid")
    if instance_id is not None:
        found = tasks.get(instance_id)
        if found is None:
            raise PolicyError(f"this server has no task {instance_id[:200]!r}", "unknown_task", 404)
        return found
    try:
        task = coerce_task(row)
    except ValueError as exc:  # TaskValidationError names the field
        raise PolicyError(f"task: {exc}", "invalid_task") from None
    if not allow_rows:
        found = tasks.get(task.instance_id)
        if found is None:
            raise PolicyError(
                f"task: this server runs only its own tasks, and {task.instance_id[:200]!r} is "
                "not one of them (open one by instance_id; the operator allows task rows with "
                "--allow-task-rows)"
            )
        differ = [f for f in TASK_MATCH_FIELDS if getattr(task, f) != getattr(found, f)]
        if differ:
            raise PolicyError(
                f"task: the row of {task.instance_id[:200]!r} differs from this server's task "
                f"in {differ}; this server runs only its own tasks"
            )
        return found
    try:
        check_repo_name(task.repo)
    except RepoError as exc:
        raise PolicyError(f"task: {exc.public}", "invalid_task") from None
    check_base_commit(task.base_commit)
    return task


#: An absolute host path in a message (``/testbed``, the session's own view, is kept).
_HOST_PATH = re.compile(r"(?<![\w./~-])(?:~/|/(?!testbed\b))[\w.@+~-]+(?:/[\w.@+~-]*)*")
_SURROGATE = re.compile("[\ud800-\udfff]")


def public_text(text: str, limit: int = 2000) -> str:
    """``text`` fit for a remote client: host paths replaced by ``<server path>``, lone
    surrogates by U+FFFD (a JSON response cannot carry them), at most ``limit`` chars."""
    text = _HOST_PATH.sub("<server path>", text)
    text = _SURROGATE.sub("\ufffd", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
