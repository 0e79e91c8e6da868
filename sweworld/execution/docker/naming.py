"""Image names: SWE-bench's name for an instance's image, and finding a session's image."""

from __future__ import annotations

from typing import Any

from sweworld.execution.docker.common import DockerFailure, error_named


def swebench_image_name(
    instance_id: str,
    *,
    namespace: str | None = "swebench",
    arch: str = "x86_64",
    tag: str = "latest",
) -> str:
    """The SWE-bench harness's name for an instance's evaluation image.

    The harness keys an instance image ``sweb.eval.<arch>.<instance_id lowercased>:<tag>``;
    images published under a Docker Hub namespace are ``<namespace>/<key>`` with every
    ``__`` replaced by ``_1776_`` (Docker Hub repository names cannot hold ``__``). With
    ``namespace=None`` (or ``""``) this is the local key the harness builds.

    >>> swebench_image_name("django__django-11099")
    'swebench/sweb.eval.x86_64.django_1776_django-11099:latest'
    >>> swebench_image_name("django__django-11099", namespace=None)
    'sweb.eval.x86_64.django__django-11099:latest'
    """
    key = f"sweb.eval.{arch}.{instance_id.lower()}:{tag}"
    if not namespace:
        return key
    return f"{namespace}/{key}".replace("__", "_1776_")


def _split_tag(name: str) -> tuple[str, str]:
    """``repo/name:tag`` -> (``repo/name``, ``tag``); the tag defaults to ``latest``."""
    head, sep, last = name.rpartition("/")
    if ":" in last:
        last, _, tag = last.partition(":")
        return f"{head}{sep}{last}", tag or "latest"
    return name, "latest"


class ImageResolver:
    """The executor's image lookup: candidate names for a task, then one the engine has."""

    def _image_candidates(self, task: Any) -> list[str]:
        if isinstance(self.image, str) and self.image:
            return [self.image]
        if callable(self.image):
            try:
                name = self.image(task)
            except Exception as exc:
                raise DockerFailure(
                    f"sweworld: the docker executor's image function failed: "
                    f"{type(exc).__name__}: {exc}\n"
                ) from exc
            if not name:
                raise DockerFailure(
                    "sweworld: the docker executor's image function gave no image.\n"
                )
            return [str(name)]
        instance_id = getattr(task, "instance_id", "") or ""
        if not instance_id:
            raise DockerFailure(
                "sweworld: the docker executor has no image for this session: it has no task "
                "with an instance_id; pass image='...' (a name, or a function of the task).\n"
            )
        names = [swebench_image_name(instance_id, namespace=self.namespace, arch=self.arch)]
        local = swebench_image_name(instance_id, namespace=None, arch=self.arch)
        return names if local in names else [*names, local]

    def _find_image(self, client: Any, candidates: list[str]) -> str:
        for name in candidates:
            try:
                client.images.get(name)
                return name
            except Exception as exc:
                if error_named(exc, "NotFound"):  # ImageNotFound is one
                    continue
                raise DockerFailure(
                    f"sweworld: the Docker engine failed looking up image {name}: {exc}\n",
                    image=name,
                ) from exc
        if self.pull:
            name = candidates[0]
            repository, tag = _split_tag(name)
            try:
                client.images.pull(repository, tag=tag)
                return name
            except Exception as exc:
                raise DockerFailure(
                    f"sweworld: pulling image {name} failed: {exc}\n", image=name
                ) from exc
        shown = " or ".join(candidates)
        raise DockerFailure(
            f"sweworld: the Docker image {shown} is not present on this engine; pull it first "
            f"(`docker pull {candidates[0]}`) or open the executor with pull=True.\n",
            image=candidates[0],
        )
