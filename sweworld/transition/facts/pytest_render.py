"""What pytest prints when the answer is determined: its header, the ``collected`` line, the
summary of a run with nothing to run, ``--collect-only -q`` and ``not found`` errors.
"""

from __future__ import annotations

from collections.abc import Sequence

from sweworld.transition.facts.environment import Environment
from sweworld.transition.facts.pytest_args import PytestOptions
from sweworld.transition.facts.pytest_config import PytestConfig, relative_to_root

# --------------------------------------------------------------------------- pytest rendering


def pytest_header(
    env: Environment,
    rootdir: str,
    inifile: str | None,
    *,
    verbosity: int = 0,
    testpaths: Sequence[str] = (),
    executable: str | None = None,
) -> str:
    """pytest's session header (without the ``collected ...`` line), as the environment's
    pytest version writes it."""
    version = env.pytest
    lines = [_banner("test session starts")]
    py_lib = f"py-{env.py_version}, " if env.py_version else ""
    platform_line = (
        f"platform {env.platform} -- Python {env.python_version}, "
        f"pytest-{env.pytest_version or '?'}, {py_lib}pluggy-{env.pluggy_version or '?'}"
    )
    if verbosity > 0 and executable:
        platform_line += f" -- {executable}"
    lines.append(platform_line)
    if verbosity > 0:
        lines.append("cachedir: .pytest_cache")
    inirel = relative_to_root(inifile, rootdir) if inifile else None
    if version >= (7, 3):
        lines.append(f"rootdir: {rootdir}")
        if inirel:
            lines.append(f"configfile: {inirel}")
        if testpaths:
            lines.append(f"testpaths: {', '.join(testpaths)}")
    else:
        line = f"rootdir: {rootdir}"
        if inirel:
            line += f", {'configfile' if version >= (6,) else 'inifile'}: {inirel}"
        if testpaths:
            line += f", testpaths: {', '.join(testpaths)}"
        lines.append(line)
    if env.pytest_plugins:
        lines.append("plugins: " + ", ".join(env.pytest_plugins))
    return "\n".join(lines) + "\n"


def _banner(text: str, fill: str = "=", width: int = 80) -> str:
    text = f" {text} "
    left = (width - len(text)) // 2
    right = width - len(text) - left
    return fill * max(left, 0) + text + fill * max(right, 0)


def _collected_line(total: int, deselected: int, errors: int, env: Environment) -> str:
    """pytest's ``collected N items / E errors / D deselected / S selected`` line."""
    word = "item" if total == 1 else "items"
    line = f"collected {total} {word}"
    if errors:
        err_word = "errors" if env.pytest < (6,) or errors != 1 else "error"
        line += f" / {errors} {err_word}"
    if deselected:
        line += f" / {deselected} deselected"
    selected = total - deselected - (errors if env.pytest < (8,) else 0)
    if total > selected:
        line += f" / {selected} selected"
    return line


_DURATION = "0.01s"


def render_pytest_empty(
    env: Environment,
    config: PytestConfig,
    options: PytestOptions,
    total: int,
    deselected: int,
    testpaths_used: Sequence[str],
    executable: str | None,
) -> str:
    """stdout of a run that collected nothing to run (exit 4 or 5)."""
    duration = _DURATION if env.pytest >= (5, 2) else "0.01 seconds"
    summary = (
        f"{deselected} deselected in {duration}" if deselected else f"no tests ran in {duration}"
    )
    if options.verbosity < 0:
        return "\n" + summary + "\n" if options.verbosity == -1 else "\n"
    out = ""
    if not options.no_header:
        out += pytest_header(
            env,
            config.rootdir,
            config.inifile,
            verbosity=options.verbosity,
            testpaths=testpaths_used,
            executable=executable,
        )
    else:
        out += _banner("test session starts") + "\n"
    collecting = "collecting ... " if options.verbosity > 0 else ""
    out += collecting + _collected_line(total, deselected, 0, env) + "\n\n"
    out += _banner(summary) + "\n"
    return out


def pytest_caveats(env: Environment, options: PytestOptions) -> tuple[str, ...]:
    """What an exact pytest answer may still differ in: its durations (the header is only
    printed in an exact answer when the environment's versions and plugins are known)."""
    return ("durations (0.01s)",)
