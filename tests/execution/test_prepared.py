"""Session bases with an environment build's products laid in: never over a file of the
base, never outside the tree, bounded, made once; the version setuptools_scm is given."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweworld.execution import prepared
from sweworld.execution.envs import EnvRecipe, PythonEnv, scm_version_env
from sweworld.execution.prepared import ProductsError, lay_products, prepared_base
from sweworld.sandbox.repos import BaseCheckout

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "HOME": "/nonexistent",
    "PATH": "/usr/bin:/bin",
}


def _tar(path: Path, members: list[tuple[str, bytes | tuple[str, str]]]) -> Path:
    """A tar of files (bytes), links and special files ((kind, target): "sym", "hard",
    "chr", "fifo"), in order, names repeated as given."""
    types = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE}
    types["fifo"] = tarfile.FIFOTYPE
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if isinstance(body, tuple):
                kind, target = body
                info.type = types[kind]
                info.linkname = target
                info.devmajor, info.devminor = (1, 3) if kind == "chr" else (0, 0)
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
    (tree / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (tree / ".gitignore").write_text("*.egg-info/\n_version.py\nbuild/\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"],
    ):
        subprocess.run(["git", *args], cwd=tree, env=GIT_ENV, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=tree, env=GIT_ENV, capture_output=True, text=True
    ).stdout.strip()
    return BaseCheckout(path=tree, head=head, branch="main")


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _env(tmp_path: Path, products: Path | None, ok: bool = True) -> PythonEnv:
    root = tmp_path / "envs" / "key"
    venv = root / "venvs" / "build1"
    venv.mkdir(parents=True, exist_ok=True)
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
    before = _snapshot(base.path)
    products = _tar(
        tmp_path / "p.tar",
        [
            ("src/pkg/_version.py", b"version = '5.4.0'\n"),
            ("src/pkg.egg-info/PKG-INFO", b"Name: pkg\n"),
            ("README.md", b"overwritten by the build\n"),
            ("src/pkg/__init__.py", b"raise SystemExit('replaced')\n"),
            ("not_ignored.py", b"import os  # would reach the agent's patch\n"),
        ],
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
    # a product git would not ignore is taken out: the patch never holds a product
    assert not (made.path / "not_ignored.py").exists()
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=made.path,
        env=GIT_ENV,
        capture_output=True,
        text=True,
    )
    assert status.stdout == ""
    assert _snapshot(base.path) == before  # the shared base is untouched
    assert prepared_base(base, env).path == made.path  # made once


def test_no_products_or_a_failed_build_leave_the_base_as_it_is(tmp_path, base):
    assert prepared_base(base, _env(tmp_path, None)) is base
    failed = _env(tmp_path / "f", _tar(tmp_path / "p.tar", [("x", b"1")]), ok=False)
    assert prepared_base(base, failed) is base


HOSTILE = [
    # each: what a build's tar may hold to write through the hard-linked base or outside
    [("/setup.py", b"PWNED absolute\n")],
    [("a/", b""), ("a/../setup.py", b"PWNED dotdot\n")],
    [("d", ("sym", "src")), ("d/pkg/__init__.py", b"PWNED symlink parent\n")],
    [("up", ("sym", "..")), ("up/outside.txt", b"PWNED outside\n")],
    [("x", ("hard", "setup.py")), ("x", b"PWNED hardlink then file\n")],
    [("setup.py", b"PWNED same name\n")],
    [("devnode", ("chr", "")), ("innocent", ("hard", "devnode"))],
    [("fifo", ("fifo", "")), ("link", ("hard", "fifo"))],
    [(".git/hooks/post-checkout", b"#!/bin/sh\nPWNED\n"), (".git/shallow", b"PWNED\n")],
    [("src/.gitignore", b"*\n"), (".gitattributes", b"* -diff\n")],
    [("nowhere-link", ("hard", "nowhere")), ("y", b"kept\n")],
    [("/".join(["d"] * 1100) + "/deep.txt", b"deep\n"), ("y", b"kept\n")],
]


@pytest.mark.parametrize("members", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_products_tar_writes_nothing_but_new_regular_files(tmp_path, base, members):
    # A products tar comes from a sandbox that ran the repository's own build: it is read
    # as hostile. Python 3.11.7's tarfile "data" filter could be got past (CVE-2025-4517),
    # and a name test made before extraction does not see links made by earlier members.
    before = _snapshot(base.path)
    outside_before = sorted(p.name for p in tmp_path.iterdir())
    tree = tmp_path / "tree"
    shutil.copytree(base.path, tree, symlinks=True, copy_function=os.link)
    laid = lay_products(_tar(tmp_path / "evil.tar", members), tree)
    assert _snapshot(base.path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*outside_before, "tree", "evil.tar"]
    )
    after = _snapshot(tree)
    assert {k: after.get(k) for k in before} == before  # every base file as it was
    made = {k: v for k, v in after.items() if k not in before}
    assert all(not k.startswith(".git/") and ".git" not in Path(k).name for k in made), made
    for path in tree.rglob("*"):  # no link, device or fifo of the tar's
        assert (path.is_dir() or path.is_file()) and not path.is_symlink(), path
    assert laid == len(made)
    if ("y", b"kept\n") in members:
        assert made.get("y") == b"kept\n"  # one bad member does not lose the others


def test_a_corrupt_missing_or_oversized_products_tar_is_a_clear_error(tmp_path, monkeypatch):
    corrupt = tmp_path / "corrupt.tar"
    corrupt.write_bytes(b"this is not a tar archive" * 40)
    with pytest.raises(ProductsError, match="not a readable tar"):
        lay_products(corrupt, tmp_path)
    with pytest.raises(ProductsError, match=r"gone\.tar"):
        lay_products(tmp_path / "gone.tar", tmp_path)
    (tmp_path / "t").mkdir()
    monkeypatch.setattr(prepared, "MAX_PRODUCT_FILES", 10)
    # every member counts, even one that would not be laid (the same name 50 times)
    many = _tar(tmp_path / "many.tar", [("setup.py", b"x")] * 50)
    with pytest.raises(ProductsError, match="over 10 entries"):
        lay_products(many, tmp_path / "t")
    monkeypatch.setattr(prepared, "MAX_PRODUCT_FILES", 100)
    monkeypatch.setattr(prepared, "MAX_PRODUCT_BYTES", 10)
    big = _tar(tmp_path / "big.tar", [("big", b"x" * 11)])
    with pytest.raises(ProductsError, match="MiB"):
        lay_products(big, tmp_path / "t")


def test_products_that_cannot_be_laid_are_remembered(tmp_path, base, monkeypatch):
    monkeypatch.setattr(prepared, "MAX_PRODUCT_FILES", 1)
    env = _env(tmp_path, _tar(tmp_path / "p.tar", [("a", b"1"), ("b", b"2")]))
    with pytest.raises(ProductsError):
        prepared_base(base, env)
    copies = []
    monkeypatch.setattr(prepared.shutil, "copytree", lambda *a, **k: copies.append(a))
    assert prepared_base(base, env) is base  # the next session: no copy, no second try
    assert copies == []
    assert "over 1 entries" in next((env.root / "bases" / "build1").glob("*.failed")).read_text()


@pytest.mark.parametrize(
    ("version", "expected"),
    [("5.4", "5.4.0"), ("0.12", "0.12.0"), ("2.0.1", "2.0.1"), ("8.0", "8.0.0")],
)
def test_setuptools_scm_is_told_the_tasks_release(version, expected):
    task = SimpleNamespace(repo="pytest-dev/pytest", version=version)
    assert scm_version_env(task, EnvRecipe()) == {
        "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST": expected
    }
    # only the project's own distribution: a dependency built from source keeps its version
    named = scm_version_env(SimpleNamespace(repo="owner/my-lib.py", version=version), EnvRecipe())
    assert named == {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_MY_LIB_PY": expected}


@pytest.mark.parametrize(
    "version", [None, "", "main", "5", "5.4; rm -rf /", "1.2.3.4", "\u0665.\u0664"]
)
def test_no_release_no_pretend_version(version):
    task = SimpleNamespace(repo="pytest-dev/pytest", version=version)
    assert scm_version_env(task, EnvRecipe()) == {}
    assert scm_version_env(SimpleNamespace(repo="", version="5.4"), EnvRecipe()) == {}


def test_a_recipe_that_sets_the_version_keeps_it():
    recipe = EnvRecipe(env={"SETUPTOOLS_SCM_PRETEND_VERSION": "9.9.9"})
    assert scm_version_env(SimpleNamespace(repo="pytest-dev/pytest", version="5.4"), recipe) == {}


def test_the_harness_pins_reach_the_build_after_the_runner(tmp_path):
    # pytest's own suite fails on a newer pluggy, seaborn 0.12 does not import with
    # matplotlib 3.9: the harness pins them, and so does the environment.
    from sweworld.execution.envs import EnvBuilder

    builder = EnvBuilder(tmp_path / "envs")
    pytest54 = builder.plan(SimpleNamespace(repo="pytest-dev/pytest", version="5.4"))
    assert pytest54.recipe.packages[0] == "pytest"
    assert "pluggy==0.13.1" in pytest54.recipe.packages
    assert pytest54.build_env == {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_PYTEST": "5.4.0"}
    pytest63 = builder.plan(SimpleNamespace(repo="pytest-dev/pytest", version="6.3"))
    assert pytest63.recipe.install == (
        "sed -i 's/>=>=/>=/' setup.cfg",  # the harness's pre_install, before the install
        "python -m pip install -e .",
    )
    seaborn = builder.plan(SimpleNamespace(repo="mwaskom/seaborn", version="0.12"))
    assert "matplotlib==3.7.2" in seaborn.recipe.packages
    assert seaborn.recipe.install == ("python -m pip install -e .[dev]",)
    flask = builder.plan(SimpleNamespace(repo="pallets/flask", version="2.3")).recipe
    assert flask.install[0].startswith("for f in requirements/tests.txt requirements/dev.txt;")
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


def test_the_packaging_digest_reads_no_special_or_huge_file(tmp_path):
    # the checkout is the repository's: a setup.py that is a fifo or links to /dev/zero
    # must neither hang nor fill the memory of the process that plans the build
    from sweworld.execution.envs import packaging_digest

    os.mkfifo(tmp_path / "setup.py")
    (tmp_path / "setup.cfg").symlink_to("/dev/zero")
    (tmp_path / "pyproject.toml").write_bytes(b"#" * (2 << 20))
    assert len(packaging_digest(tmp_path)) == 16
