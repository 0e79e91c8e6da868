"""Helpers for the SWR stage tests: tiny git repositories, real diffs, toy-task bases."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sweworld.reward.candidate import view_candidate, view_gold
from sweworld.reward.types import CandidateView, RewardContext

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; stdout decoded like a patch read from disk would be."""
    proc = subprocess.run(
        ["git", "-c", "core.autocrlf=false", *args],
        cwd=repo,
        env={**os.environ, **_GIT_ENV},
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode("utf-8", errors="surrogateescape")


def make_repo(root: Path, files: dict[str, str | bytes]) -> Path:
    """A git repository at ``root`` with ``files`` committed."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root


def write(root: Path, files: dict[str, str | bytes | None]) -> None:
    """Write (or delete, for None) files under ``root``."""
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))


def diff(repo: Path, *extra: str) -> str:
    """``git diff`` of the work tree (new files included) against HEAD; the tree is then
    reset to HEAD, so ``repo`` is the base checkout again."""
    git(repo, "add", "-A")
    text = git(repo, "diff", "--cached", "-M", *extra)
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-qfd")
    return text


def toy_base(task, dest: Path) -> Path:
    """The toy task's base checkout (its files at ``base_commit``) in ``dest``."""
    from sweworld.tasks.toy import ensure_toy_repo

    repo = ensure_toy_repo()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", task.base_commit],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def context(
    task, patch: str | None, base: Path | None, mode: str = "oracle", with_gold: bool = True
) -> RewardContext:
    """A RewardContext for ``patch`` on the task (gold view in oracle mode)."""
    candidate: CandidateView = view_candidate(patch, base_dir=base)
    gold = view_gold(task, base) if with_gold and mode == "oracle" else None
    return RewardContext(task=task, candidate=candidate, mode=mode, gold=gold, base_dir=base)  # type: ignore[arg-type]
