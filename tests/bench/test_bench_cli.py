"""The ``sweworld bench`` registry: every benchmark module imports, has ``add_arguments``
and ``run``, and is listed by ``sweworld bench --help``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util

import pytest

from sweworld.bench import cli as bench_cli
from sweworld.cli import main


def test_every_benchmark_has_help():
    assert set(bench_cli.HELP) == set(bench_cli.BENCHMARKS)


@pytest.mark.parametrize("name", sorted(bench_cli.BENCHMARKS))
def test_each_benchmark_module_imports_with_its_entry_points(name):
    module = importlib.import_module(bench_cli.BENCHMARKS[name])
    assert callable(getattr(module, "add_arguments", None)), name
    assert callable(getattr(module, "run", None)), name
    parser = argparse.ArgumentParser(prog=f"sweworld bench {name}")
    module.add_arguments(parser)  # its options build without error
    assert parser.format_help()


@pytest.mark.parametrize("name", sorted(bench_cli.BENCHMARKS))
def test_each_benchmark_shows_its_options(name, capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", name, "--help"])
    assert done.value.code == 0
    options = [w for w in capsys.readouterr().out.split() if w.startswith("--")]
    # a module that failed to import would list --help alone
    assert set(options) - {"--help"}, name


def test_bench_help_lists_every_benchmark(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for name in bench_cli.BENCHMARKS:
        assert f"    {name}" in text, name


def test_a_benchmark_that_cannot_load_says_so(capsys):
    args = argparse.Namespace(bench_command="tts", bench_import_error="x: No module named y")
    assert bench_cli.run(args) == 2
    assert "cannot load x: No module named y" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "option", "value"),
    [
        ("swt", "--limit", "-3"),
        ("swt", "--partial-every", "0"),
        ("swr", "--samples", "0"),  # was a ValueError after the data had loaded
        ("swr", "--bon-draws", "0"),
        ("swr", "--bon-tasks", "-1"),
        ("tts", "--draws", "0"),  # was "no task with several candidates of both labels"
        ("tts", "--samples", "0"),
        ("tts", "--max-tasks", "x"),
    ],
)
def test_counts_out_of_range_are_refused_by_the_parser(name, option, value, tmp_path, capsys):
    argv = ["bench", name, "--data", str(tmp_path), "--out", str(tmp_path / "R"), option, value]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err
    assert not (tmp_path / "R").exists()


@pytest.mark.parametrize("name", ["", "swt", "swr", "tts", "e2e", "throughput", "render"])
def test_bench_help_has_no_sphinx_markup(name, capsys):
    argv = ["bench", *([name] if name else []), "--help"]
    with pytest.raises(SystemExit):
        main(argv)
    out = capsys.readouterr().out
    assert "``" not in out and ":mod:`" not in out and ":func:`" not in out


#: Benchmarks whose modules other parts of the project own (their options' help is theirs).
_ELSEWHERE = {"swt", "swr", "executors", "e2e"}


@pytest.mark.parametrize("name", sorted(set(bench_cli.BENCHMARKS) - _ELSEWHERE))
def test_every_option_has_help(name):
    parser = argparse.ArgumentParser(prog=f"sweworld bench {name}")
    importlib.import_module(bench_cli.BENCHMARKS[name]).add_arguments(parser)
    missing = [a.option_strings for a in parser._actions if a.option_strings and not a.help]
    assert not missing, (name, missing)


def test_benchmarks_folder_holds_results_not_scripts():
    from tests.conftest import PROJECT

    assert not list((PROJECT / "benchmarks").glob("*.py"))  # every measurement: sweworld bench


#: Third-party modules a benchmark may import only when it runs (extras, optional backends).
OPTIONAL_MODULES = {"llama_cpp", "ray", "docker", "matplotlib", "tqdm", "torch", "httpx"}


def test_every_import_inside_the_benchmarks_resolves():
    """Imports inside functions (run only when a benchmark runs) name modules and names
    that exist: a benchmark moved from a script folder once imported a sibling script."""
    import ast
    import sys
    from pathlib import Path

    import sweworld.bench

    missing = []
    for path in sorted(Path(sweworld.bench.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            top = node.module.split(".")[0]
            if top != "sweworld":  # a third-party module: optional ones may be absent
                known = top in sys.stdlib_module_names or top in OPTIONAL_MODULES
                if not known and importlib.util.find_spec(top) is None:
                    missing.append(f"{path.name}: {node.module}")
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name):
                    try:
                        importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{path.name}: {node.module}.{alias.name}")
    assert not missing, missing
