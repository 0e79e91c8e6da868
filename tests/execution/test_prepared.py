"""Session bases with an environment build's products laid in: never over a file of the
base, never outside the tree, bounded, made once; the version setuptools_scm is given."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweworld.execution import prepared
from sweworld.execution.envs import EnvRecipe, PythonEnv, scm_version_env
from sweworld.execution.prepared import ProductsError, lay_products, prepared_base
from sweworld.sandbox.repos import BaseCheckout


def _tar(path: Path, members: dict[str, bytes | tuple[str, str]]) -> Path:
    """A tar of files (bytes) and links (("sym" | "hard", target))."""
    with tarfile.open(path, "w") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                kind, target = body
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = target
                archive.addfile(info)
            else:
                info.size = len(body)
                archive.addfile(info, io.BytesIO(body))
    return path


@pytest.fixture
def base(tmp_path):
    tree = tmp_path / "base"
    (tree / "src" / "pkg").mkdir(parents=True)
    (tree / "src" / "pkg" / "__init__.py").write_text("VERSION = 'base'\n")
    (tree / "README.md").write_text("base readme\n")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return BaseCheckout(path=tree, head="a" * 40, branch="main")


def _env(tmp_path: Path, products: Path | None, ok: bool = True) -> PythonEnv:
    root = tmp_path / "envs" / "key"
    venv = root / "venvs" / "build1"
    venv.mkdir(parents=True)
    return PythonEnv(
        key="key",
        root=root,
        venv=venv,
        ok=ok,
        log="",
        build_s=0.0,
        recipe=EnvRecipe(),
        products=products,
    )


def test_products_are_laid_beside_the_base_and_never_over_it(tmp_path, base):
    products = _tar(
        tmp_path / "p.tar",
        {
            "src/pkg/_version.py": b"version = '5.4.0'\n",
            "src/pkg.egg-info/PKG-INFO": b"Name: pkg\n",
            "README.md": b"overwritten by the build\n",
            "src/pkg/__init__.py": b"raise SystemExit('replaced')\n",
        },
    )
    env = _env(tmp_path, products)
    made = prepared_base(base, env)
    assert made.head == base.head and made.branch == base.branch
    assert made.path != base.path and made.path.is_relative_to(env.root / "bases" / "build1")
    assert (made.path / "src/pkg/_version.py").read_text() == "version = '5.4.0'\n"
    assert (made.path / "src/pkg.egg-info/PKG-INFO").read_text() == "Name: pkg\n"
    # the base's own files win, and are the base's (hard links: nothing copied)
    assert (made.path / "README.md").read_text() == "base readme\n"
    assert (made.path / "src/pkg/__init__.py").read_text() == "VERSION = 'base'\n"
    assert (made.path / "README.md").stat().st_ino == (base.path / "README.md").stat().st_ino
    assert (made.path / ".git" / "HEAD").exists()
    # the base itself is untouched
    assert not (base.path / "src/pkg/_version.py").exists()
    assert sorted(p.name for p in base.path.rglob("*")) == [
        ".git",
        "HEAD",
        "README.md",
        "__init__.py",
        "pkg",
        "src",
    ]
    # made once: a second session gets the same folder
    assert prepared_base(base, env).path == made.path


def test_no_products_or_a_failed_build_leave_the_base_as_it_is(tmp_path, base):
    assert prepared_base(base, _env(tmp_path, None)) is base
    failed = _env(tmp_path / "f", _tar(tmp_path / "p.tar", {"x": b"1"}), ok=False)
    assert prepared_base(base, failed) is base


def test_nothing_is_laid_outside_the_tree(tmp_path, base, caplog):
    tree = tmp_path / "tree"
    tree.mkdir()
    products = _tar(
        tmp_path / "evil.tar",
        {
            "../escaped.txt": b"out\n",
            "/tmp/absolute-product.txt": b"out\n",
            "link-out": ("sym", "/etc/passwd"),
            "hard-out": ("hard", "../outside.txt"),
            "fine.txt": b"in\n",
        },
    )
    assert lay_products(products, tree) == 2
    # an absolute name is laid inside the tree (tarfile's data filter strips the "/")
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*") if p.is_file()) == [
        "fine.txt",
        "tmp/absolute-product.txt",
    ]
    assert not (tmp_path / "escaped.txt").exists()
    assert not Path("/tmp/absolute-product.txt").exists()
    assert "not laid in" in caplog.text


def test_a_corrupt_or_oversized_products_tar_is_a_clear_error(tmp_path, base, monkeypatch):
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(b"this is not a tar archive" * 40)
    with pytest.raises(ProductsError, match="not a readable tar"):
        lay_products(corrupt, tmp_path)
    monkeypatch.setattr(prepared, "MAX_PRODUCT_FILES", 2)
    many = _tar(tmp_path / "many.tar", {f"f{i}": b"x" for i in range(5)})
    with pytest.raises(ProductsError, match="over 2 files"):
        lay_products(many, tmp_path / "t")
    monkeypatch.setattr(prepared, "MAX_PRODUCT_FILES", 100)
    monkeypatch.setattr(prepared, "MAX_PRODUCT_BYTES", 10)
    big = _tar(tmp_path / "big.tar", {"big": b"x" * 11})
    with pytest.raises(ProductsError, match="MiB"):
        lay_products(big, tmp_path / "t")
    # the session still opens on the plain base: prepared_base raises, the executor's hook
    # logs it and keeps the base (test_local: a failed build)


@pytest.mark.parametrize(
    ("version", "expected"),
    [("5.4", "5.4.0"), ("0.12", "0.12.0"), ("2.0.1", "2.0.1"), ("8.0", "8.0.0")],
)
def test_setuptools_scm_is_told_the_tasks_release(version, expected):
    task = SimpleNamespace(version=version)
    assert scm_version_env(task, EnvRecipe()) == {"SETUPTOOLS_SCM_PRETEND_VERSION": expected}


@pytest.mark.parametrize("version", [None, "", "main", "5", "5.4; rm -rf /", "1.2.3.4"])
def test_no_release_no_pretend_version(version):
    assert scm_version_env(SimpleNamespace(version=version), EnvRecipe()) == {}


def test_a_recipe_that_sets_the_version_keeps_it():
    recipe = EnvRecipe(env={"SETUPTOOLS_SCM_PRETEND_VERSION": "9.9.9"})
    assert scm_version_env(SimpleNamespace(version="5.4"), recipe) == {}


def test_the_harness_pins_reach_the_build_after_the_runner(tmp_path):
    # pytest's own suite fails on a newer pluggy, seaborn 0.12 does not import with
    # matplotlib 3.9: the harness pins them, and so does the environment.
    from sweworld.execution.envs import EnvBuilder

    builder = EnvBuilder(tmp_path / "envs")
    pytest54 = builder.plan(SimpleNamespace(repo="pytest-dev/pytest", version="5.4"))
    assert pytest54.recipe.packages[0] == "pytest"
    assert "pluggy==0.13.1" in pytest54.recipe.packages
    assert pytest54.build_env == {"SETUPTOOLS_SCM_PRETEND_VERSION": "5.4.0"}
    pytest63 = builder.plan(SimpleNamespace(repo="pytest-dev/pytest", version="6.3"))
    assert pytest63.recipe.install == (
        "sed -i 's/>=>=/>=/' setup.cfg",  # the harness's pre_install, before the install
        "python -m pip install -e .",
    )
    seaborn = builder.plan(SimpleNamespace(repo="mwaskom/seaborn", version="0.12"))
    assert "matplotlib==3.7.2" in seaborn.recipe.packages
    assert seaborn.recipe.install == ("python -m pip install -e .[dev]",)
    flask = builder.plan(SimpleNamespace(repo="pallets/flask", version="2.3")).recipe
    assert flask.install[0].startswith("for f in requirements/dev.txt; do if [ -f")
    assert flask.install[1].startswith("pip install ") and "Werkzeug==2.3.7" in flask.install[1]
    assert flask.install[-1] == "python -m pip install -e ."
    # a repository the harness pins nothing for keeps its recipe
    requests = builder.plan(SimpleNamespace(repo="psf/requests", version="2.3")).recipe
    assert requests.packages == ("pytest",) and requests.install == ("python -m pip install .",)


def test_a_requirements_file_the_checkout_lacks_is_skipped_and_a_failing_one_fails(tmp_path):
    import subprocess

    from sweworld.tasks.swebench_specs import harness_spec

    loop = harness_spec("pallets/flask", "2.3").install_commands()[0]
    skipped = subprocess.run(
        ["bash", "-ec", loop + "\necho after"], cwd=tmp_path, text=True, capture_output=True
    )
    assert skipped.returncode == 0 and skipped.stdout == "after\n"
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements/dev.txt").write_text("x\n")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pip").write_text('#!/bin/sh\necho pip "$@"; exit 7\n')
    (fake / "pip").chmod(0o755)
    failed = subprocess.run(
        ["bash", "-ec", loop + "\necho after"],
        cwd=tmp_path,
        text=True,
        capture_output=True,
        env={"PATH": f"{fake}:/usr/bin:/bin"},
    )
    assert failed.stdout == "pip install -r requirements/dev.txt\n" and failed.returncode == 7


def test_bases_whose_packaging_differs_get_environments_of_their_own(tmp_path):
    # pytest 5.4's entry point moved from pytest:main to pytest:console_main within the
    # version: one venv for both bases ran `pytest` into an ImportError
    from sweworld.execution.envs import EnvBuilder, packaging_digest

    old, new, same = tmp_path / "old", tmp_path / "new", tmp_path / "same"
    for tree, entry in ((old, "pytest:main"), (new, "pytest:console_main"), (same, "pytest:main")):
        tree.mkdir()
        (tree / "setup.cfg").write_text(f"[options.entry_points]\nconsole_scripts = {entry}\n")
        (tree / "src.py").write_text(f"# {tree.name}\n")  # the code differs in all three
    task = SimpleNamespace(repo="pytest-dev/pytest", version="5.4", base_commit="b" * 40)
    builder = EnvBuilder(tmp_path / "envs")
    keys = {t.name: builder.key_for(task, builder.plan(task, t)) for t in (old, new, same)}
    assert keys["old"] != keys["new"] and keys["old"] == keys["same"]
    assert packaging_digest(None) == "" and len(packaging_digest(old)) == 16
