"""``sweworld docker ...``: build task images locally and see what the engine has.

- ``sweworld docker build --tasks FILE [--id ID ...] [--rebuild]``: the SWE-bench-layout
  image of each task (:func:`~sweworld.execution.docker.images.build_task_image`);
- ``sweworld docker build-test-image``: the image of the executor's generic real-engine
  tests (prints ``export SWEWORLD_DOCKER_TEST_IMAGE=...`` with ``--export``);
- ``sweworld docker status [--tasks FILE]``: whether an engine answers, and which tasks
  have an image on it.

Also runs as ``python3 -m sweworld.execution.docker.cli ...`` (what ``.ci/docker-up`` does).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

__all__ = ["add_docker_parsers", "main", "run"]


def _add_commands(sub: Any) -> None:
    build = sub.add_parser("build", help="build the image of each task (SWE-bench layout)")
    build.add_argument("--tasks", required=True, help="tasks file (JSONL)")
    build.add_argument("--id", action="append", default=[], help="only this instance id")
    build.add_argument("--rebuild", action="store_true", help="build even when up to date")
    build.add_argument("--cache", default=None, help="base file system cache folder")
    test = sub.add_parser("build-test-image", help="the image of the real-engine tests")
    test.add_argument("--cache", default=None, help="base file system cache folder")
    test.add_argument("--rebuild", action="store_true", help="rebuild the base too")
    test.add_argument(
        "--export", action="store_true", help="print `export SWEWORLD_DOCKER_TEST_IMAGE=...`"
    )
    status = sub.add_parser("status", help="is an engine there; which tasks have images")
    status.add_argument("--tasks", default=None, help="tasks file (JSONL)")


def add_docker_parsers(sub: Any) -> None:
    """Add ``sweworld docker`` and its sub-commands to the main parser's ``sub``."""
    docker = sub.add_parser("docker", help="build task images for the Docker executor")
    _add_commands(docker.add_subparsers(dest="docker_command", required=True))


def _tasks(path: str, ids: list[str]) -> list[Any]:
    from sweworld.tasks import load_tasks

    tasks = load_tasks(path)
    if ids:
        known = {t.instance_id for t in tasks}
        missing = [i for i in ids if i not in known]
        if missing:
            raise SystemExit(f"sweworld: no task {', '.join(missing)} in {path}")
        tasks = [t for t in tasks if t.instance_id in set(ids)]
    return tasks


def _cmd_build(args: argparse.Namespace) -> int:
    from sweworld.execution.docker.images import ImageBuildError, build_task_image
    from sweworld.sandbox.manager import SessionManager

    tasks = _tasks(args.tasks, args.id)
    failed = 0
    manager = SessionManager()
    try:
        for task in tasks:
            try:
                build = build_task_image(
                    task, manager=manager, rebuild=args.rebuild, cache=args.cache
                )
            except ImageBuildError as exc:
                failed += 1
                print(f"{task.instance_id}: FAILED\n{exc}", file=sys.stderr)
                continue
            state = "built" if build.built else "up to date"
            note = f" ({build.note})" if build.note else ""
            print(f"{task.instance_id}: {build.name} {state} in {build.seconds:.1f} s{note}")
    finally:
        manager.close_all()
    print(f"{len(tasks) - failed} of {len(tasks)} image(s) ready", file=sys.stderr)
    return 1 if failed else 0


def _cmd_build_test_image(args: argparse.Namespace) -> int:
    from sweworld.execution.docker.images import build_test_image

    build = build_test_image(cache=args.cache, rebuild=args.rebuild)
    if args.export:
        print(f"export SWEWORLD_DOCKER_TEST_IMAGE={shlex.quote(build.name)}")
    else:
        state = "built" if build.built else "up to date"
        print(f"{build.name} {state} in {build.seconds:.1f} s (base {build.base})")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from sweworld.execution.docker.images import image_present
    from sweworld.execution.docker.naming import swebench_image_name

    try:
        import docker

        client = docker.from_env(timeout=20)
        version = client.version()
    except Exception as exc:
        print(f"engine: not reachable ({type(exc).__name__}: {exc})")
        return 1
    print(f"engine: Docker {version.get('Version', '?')} ({version.get('Os', '?')})")
    if not args.tasks:
        return 0
    missing = 0
    for task in _tasks(args.tasks, []):
        name = swebench_image_name(task.instance_id)
        local = swebench_image_name(task.instance_id, namespace=None)
        found = next((n for n in (name, local) if image_present(client, n) is not None), None)
        missing += found is None
        print(f"{task.instance_id}: {found or 'no image (' + name + ')'}")
    return 1 if missing else 0


def run(args: argparse.Namespace) -> int:
    """Run a parsed ``sweworld docker ...`` command."""
    from sweworld.execution.docker.images import ImageBuildError

    handlers = {
        "build": _cmd_build,
        "build-test-image": _cmd_build_test_image,
        "status": _cmd_status,
    }
    try:
        return handlers[args.docker_command](args)
    except ImageBuildError as exc:
        print(exc, file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """``python3 -m sweworld.execution.docker.cli``: the same sub-commands."""
    parser = argparse.ArgumentParser(prog="sweworld docker", description=__doc__.split("\n")[0])
    _add_commands(parser.add_subparsers(dest="docker_command", required=True))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
