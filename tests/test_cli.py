"""The command line, run as a user would run it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sweworld.cli import main, read_action, read_actions
from tests.conftest import PROJECT, requires_sandbox, shared_data_dir

DEMO = PROJECT / "data" / "toy" / "demo_actions.jsonl"


def sweworld(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweworld", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=300,
        cwd=PROJECT,
    )


def test_tasks_list_and_show(capsys):
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "sweworld__stockroom-1" in out and "4 task(s)" in out
    assert main(["tasks", "show", "--id", "sweworld__stockroom-2", "--field", "FAIL_TO_PASS"]) == 0
    f2p = json.loads(capsys.readouterr().out)
    assert f2p[0].startswith("tests/test_inventory.py::TestRemove::")
    assert main(["tasks", "show", "--id", "sweworld__stockroom-2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["repo"] == "sweworld/stockroom"


def test_tasks_show_a_real_swebench_row():
    lite = shared_data_dir() / "swebench_lite.jsonl.gz"
    if not lite.exists():
        pytest.skip("shared data not present: SWE-bench Lite (swebench_lite.jsonl.gz)")
    proc = sweworld("tasks", "show", "--file", str(lite), "--id", "django__django-11099")
    assert proc.returncode == 0
    assert "== instance_id: django__django-11099" in proc.stdout
    assert "== base_commit: d26b2424437dabeeca94d7900b37d2df4410da0c" in proc.stdout
    assert "UsernameValidator" in proc.stdout


def test_errors_are_one_line_not_tracebacks():
    proc = sweworld("tasks", "show", "--id", "no-such-task")
    assert proc.returncode == 2
    assert proc.stderr.startswith("sweworld: error:") and "Traceback" not in proc.stderr
    proc = sweworld("run", "--id", "sweworld__stockroom-1", "--actions", "/nonexistent.jsonl")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_read_actions_validates_lines():
    assert list(read_actions(['"ls"', "", '{"function": "finish"}'])) == [
        "ls",
        {"function": "finish"},
    ]
    with pytest.raises(ValueError, match="actions line 2: invalid JSON"):
        list(read_actions(['"ls"', "ls -la"]))
    with pytest.raises(ValueError, match="expected a JSON string or object"):
        list(read_actions(["[1, 2]"]))


@requires_sandbox
def test_run_replays_actions_and_prints_the_patch():
    proc = sweworld("run", "--id", "sweworld__stockroom-1", "--actions", str(DEMO))
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    observations, final = lines[:-1], lines[-1]
    assert all(set(o) == {"observation", "exit_code", "done"} for o in observations)
    assert "Initial commit of stockroom" in observations[0]["observation"]
    no_exec = [o for o in observations if "no executor" in o["observation"]]
    assert no_exec and all(o["exit_code"] == 126 for o in no_exec)
    assert observations[-1]["done"] is True
    assert "slug.strip(separator)" in final["patch"]
    assert final["patch"].startswith("diff --git a/stockroom/textutil.py")


@requires_sandbox
def test_run_with_a_scripted_executor_and_escapes(tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([{"pattern": "pytest", "stdout": "1 passed\n"}]))
    actions = tmp_path / "a.jsonl"
    actions.write_text(
        "\n".join(
            json.dumps(a)
            for a in [
                "git log --all --oneline",
                "git reflog",
                "ls ..",
                "cat /etc/passwd",
                "python -m pytest -q",
            ]
        )
        + "\n"
    )
    proc = sweworld(
        "run",
        "--id",
        "sweworld__stockroom-2",
        "--actions",
        str(actions),
        "--executor",
        f"scripted:{rules}",
    )
    assert proc.returncode == 0, proc.stderr
    obs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert obs[0]["observation"].count("\n") == 4  # two commits: the base and its parent
    assert "<output>\n</output>" in obs[1]["observation"]  # empty reflog
    assert "testbed" in obs[2]["observation"] and "home" not in obs[2]["observation"]
    assert "root:x:0:0" in obs[3]["observation"] and "sshd" not in obs[3]["observation"]
    assert "1 passed" in obs[4]["observation"]
    assert obs[-1] == {"patch": ""}


@requires_sandbox
def test_shell_reads_multiline_actions(monkeypatch, capsys):
    script = "\n".join(
        [
            "cat > /tmp/x.txt <<'EOF'",
            "hello",
            "EOF",
            "<function=file_editor>",
            "<parameter=command>view</parameter>",
            "<parameter=path>/tmp/x.txt</parameter>",
            "</function>",
            ":patch",
            "echo done",
            ":quit",
            "",
        ]
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    from sweworld import cli, shell

    args = cli.build_parser().parse_args(["shell", "--id", "sweworld__stockroom-1"])
    assert shell.cmd_shell(args, stream=io.StringIO(script), out=sys.stdout) == 0
    out = capsys.readouterr().out
    assert "(no changes)" in out
    assert "done" in out
    assert "Viewing non-Python files is disallowed" in out  # R2E-Gym's python_only default


def test_read_action_heredoc_and_continuation():
    stream = io.StringIO("echo a \\\n b\ncat <<EOF\nx\nEOF\n")
    out = io.StringIO()
    assert read_action(stream, out) == "echo a \\\n b"
    assert read_action(stream, out) == "cat <<EOF\nx\nEOF"
    assert read_action(stream, out) is None


def test_version():
    proc = sweworld("--version")
    assert proc.stdout.startswith("sweworld ")


def test_console_script_is_declared():
    text = Path(PROJECT / "pyproject.toml").read_text()
    assert 'sweworld = "sweworld.cli:main"' in text


def test_grade_a_log(tmp_path):
    from sweworld.execution.grading import render_pytest_log
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    task = load_tasks(toy_tasks_path())[0]
    statuses = dict.fromkeys(task.FAIL_TO_PASS + task.PASS_TO_PASS, "PASSED")
    log = tmp_path / "run.log"
    log.write_text(render_pytest_log(statuses))
    proc = sweworld("grade", "--id", task.instance_id, "--log", str(log))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[task.instance_id]["resolved"] is True
    statuses[task.FAIL_TO_PASS[0]] = "FAILED"
    log.write_text(render_pytest_log(statuses))
    report = json.loads(sweworld("grade", "--id", task.instance_id, "--log", str(log)).stdout)
    assert report[task.instance_id]["resolved"] is False
    assert report[task.instance_id]["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        task.FAIL_TO_PASS[0]
    ]


@requires_sandbox
def test_grade_a_patch_for_real(tmp_path):
    from sweworld.tasks import load_tasks
    from sweworld.tasks.toy import toy_tasks_path

    task = load_tasks(toy_tasks_path())[2]
    gold = tmp_path / "gold.patch"
    gold.write_text(task.patch)
    proc = sweworld("grade", "--id", task.instance_id, "--patch", str(gold), "--executor", "local")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[task.instance_id]["resolved"] is True
    base = json.loads(sweworld("grade", "--id", task.instance_id).stdout)[task.instance_id]
    assert base["resolved"] is False
    assert base["tests_status"]["FAIL_TO_PASS"]["failure"] == task.FAIL_TO_PASS


# --------------------------------------------------------------------------- configuration errors

ID = ("--id", "sweworld__stockroom-1")


def _bad_configurations(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": 1\n')
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text("3\n")
    actions = tmp_path / "actions.jsonl"
    actions.write_text('"ls"\n')
    sim = ["simulate", *ID, "--command", "python -m pytest tests -rA"]
    return {
        "run --actions folder": (["run", *ID, "--actions", str(folder)], "is a folder"),
        "grade --patch folder": (["grade", *ID, "--patch", str(folder)], "is a folder"),
        "grade --log folder": (["grade", *ID, "--log", str(folder)], "is a folder"),
        "simulate --patch folder": ([*sim, "--patch", str(folder)], "is a folder"),
        "run --executor os.system": (
            ["run", *ID, "--actions", str(actions), "--executor", "os.system"],
            "os.system",
        ),
        "simulate --model bogus": ([*sim, "--model", "bogus:thing"], "unknown LM spec"),
        "missing replay file": ([*sim, "--model", f"replay:{tmp_path}/no.jsonl"], "not exist"),
        "replay file not JSON": ([*sim, "--model", f"replay:{broken}"], "invalid JSON"),
        "replay file of numbers": ([*sim, "--model", f"replay:{numbers}"], "not valid"),
        "replay file a folder": ([*sim, "--model", f"replay:{folder}"], "not a file"),
        "openai spec without model": ([*sim, "--model", "openai:http://h:1"], "needs a model"),
        "run --executor simulated --model bogus": (
            ["run", *ID, "--actions", str(actions), "--executor", "simulated", "--model", "x"],
            "unknown LM spec",
        ),
        "patch not UTF-8": (["grade", *ID, "--patch", str(_latin1(tmp_path))], "not UTF-8"),
    }


def _latin1(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.patch"
    path.write_bytes(b"caf\xe9\n")
    return path


@pytest.mark.parametrize(
    "case",
    [
        "run --actions folder",
        "grade --patch folder",
        "grade --log folder",
        "simulate --patch folder",
        "run --executor os.system",
        "simulate --model bogus",
        "missing replay file",
        "replay file not JSON",
        "replay file of numbers",
        "replay file a folder",
        "openai spec without model",
        "run --executor simulated --model bogus",
        "patch not UTF-8",
    ],
)
def test_configuration_errors_exit_2_with_one_line(tmp_path, capsys, case):
    argv, message = _bad_configurations(tmp_path)[case]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweworld: error: "), captured.err
    assert message in lines[0]
    assert captured.out == ""  # no simulated "result" carrying the error


def test_configuration_errors_through_the_console(tmp_path):
    proc = sweworld("simulate", *ID, "--command", "pytest", "--model", "bogus:thing")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("sweworld: error: unknown LM spec")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = sweworld("grade", *ID, "--patch", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_simulate_help_names_the_real_default(capsys):
    def help_of(command: str) -> str:
        with pytest.raises(SystemExit):
            main([command, "--help"])
        return " ".join(capsys.readouterr().out.split())

    simulate = help_of("simulate")
    assert "(default: outcome; simulated when --model is given)" in simulate
    assert "(default: none)" not in simulate
    assert "(default: none)" in help_of("run")


@requires_sandbox
def test_simulate_says_when_the_model_cannot_answer():
    # Nothing listens on port 9: the model is unreachable at run time (not a spec error).
    proc = sweworld(
        "simulate", *ID, "--command", "python -m pytest tests -rA",
        "--model", "openai:http://127.0.0.1:9#m",
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweworld: error: the model could not answer")
    result = json.loads(proc.stdout)  # what was answered is still printed
    assert result["info"]["calls"][0]["info"]["fallback"] is True


@requires_sandbox
def test_simulate_step_timeout_bounds_a_slow_model(chat_server, capsys):
    chat_server.delay = 5.0  # the server answers after 5 s; the step may take 1 s
    argv = ["simulate", *ID, "--command", "python -m pytest tests -rA",
            "--model", f"openai:{chat_server.url}#m", "--step-timeout", "1"]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    info = result["info"]["calls"][0]["info"]
    assert info["timed_out"] is True and info["timeout_s"] == 1.0
    assert result["exit_code"] == 126 and "could not be simulated" in result["stderr"]
    assert main([*argv[:-1], "0"]) == 2
    assert "--step-timeout must be positive" in capsys.readouterr().err


@requires_sandbox
def test_verbose_shows_simulator_failures_quiet_does_not(tmp_path):
    answers = tmp_path / "garbage.jsonl"
    answers.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("{{{", "nope", "[]")))
    argv = ["simulate", *ID, "--command", "python -c 'import stockroom'",
            "--model", f"replay:{answers}"]  # fmt: skip
    quiet = sweworld(*argv)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["info"]["calls"][0]["info"]["fallback"] is True
    loud = sweworld("-v", *argv)
    assert loud.returncode == 0
    assert "WARNING sweworld.transition.simulated" in loud.stderr
    assert "no valid prediction in 3 attempt(s)" in loud.stderr


def test_read_input_refuses_endless_and_oversized_files(tmp_path):
    from sweworld.cli import read_input

    with pytest.raises(ValueError, match="larger than 1000 bytes"):
        read_input("/dev/zero", "actions file", max_bytes=1000)
    big = tmp_path / "big.patch"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(ValueError, match="larger than"):
        read_input(str(big), "patch file", max_bytes=1000)
    ok = tmp_path / "crlf.txt"
    ok.write_bytes(b"a\r\nb\rc\n")
    assert read_input(str(ok), "file", max_bytes=1000) == "a\nb\nc\n"
