"""Console scripts a repository declares go to the executor inside a real sandbox session.

Before: only a hard-coded list of names was intercepted, so ``stockctl`` (declared in the
repository's setup.cfg, not installed in the sandbox) was answered ``command not found``
(exit 127) without the executor ever seeing it.
"""

from __future__ import annotations

from sweworld.execution.scripted import ScriptedExecutor
from sweworld.sandbox.executor import ExecutionResult
from tests.conftest import requires_sandbox

pytestmark = requires_sandbox


class Recorder(ScriptedExecutor):
    def execute(self, request):
        self.calls.append(request)
        return ExecutionResult(stdout=f"ran {' '.join(request.argv)}\n", exit_code=0)


def make_repo(root, files):
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_a_declared_console_script_reaches_the_executor(manager, tmp_path):
    repo = make_repo(
        tmp_path / "toolrepo",
        {
            "setup.cfg": "[metadata]\nname = toolrepo\n[options.entry_points]\n"
            "console_scripts =\n    stockctl = toolrepo.cli:main\n",
            "setup.py": "from setuptools import setup\n"
            "setup(entry_points={'console_scripts': ['stock-report=toolrepo.r:main']})\n",
        },
    )
    executor = Recorder()
    with manager.open(repo="someone/toolrepo", repo_path=repo, executor=executor) as s:
        out = s.run("stockctl --list a.txt")
        assert (out.exit_code, out.stdout) == (0, "ran stockctl --list a.txt\n")
        out = s.run("echo x | stock-report")
        assert (out.exit_code, out.stdout) == (0, "ran stock-report\n")
        assert [c.argv for c in executor.calls] == [
            ("stockctl", "--list", "a.txt"),
            ("stock-report",),
        ]
        # Anything else the repository does not declare is still bash's own "not found".
        missing = s.run("stockctl2 x")
        assert missing.exit_code == 127
        assert missing.stderr == "bash: line 1: stockctl2: command not found\n"
        later = s.run("echo a\nstockctl2")
        assert later.stderr == "bash: line 2: stockctl2: command not found\n"
        assert len(executor.calls) == 2


def test_without_declared_scripts_nothing_changes(manager, tmp_path):
    repo = make_repo(tmp_path / "plain", {"setup.py": "from setuptools import setup\nsetup()\n"})
    executor = Recorder()
    with manager.open(repo="someone/plain", repo_path=repo, executor=executor) as s:
        missing = s.run("stockctl x")
        assert missing.exit_code == 127
        assert missing.stderr == "bash: line 1: stockctl: command not found\n"
        assert executor.calls == []
