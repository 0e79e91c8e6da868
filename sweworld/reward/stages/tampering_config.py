"""Test tampering in runner configuration files (``pytest.ini``, ``tox.ini``, ``setup.cfg``,
``pyproject.toml``): whole files parsed and compared section by section, or, from hunks
alone, each changed line given its section and key; every changed key is judged by
:mod:`sweworld.reward.stages.tampering_options`.
"""

from __future__ import annotations

import configparser
import shlex
from pathlib import PurePosixPath
from typing import Any

from sweworld.reward.candidate import Hunk
from sweworld.reward.stages.tampering_options import (
    PYTEST_SECTIONS,
    is_tox_section,
    judge_key,
    key_role,
)
from sweworld.reward.types import ChangedFile

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    tomllib = None  # type: ignore[assignment]


__all__ = ["Sections", "config_edit_reasons"]

Sections = dict[str, dict[str, str]]


def _ini_sections(text: str) -> Sections | None:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return {s: dict(parser.items(s)) for s in parser.sections()}


def _toml_value(value: Any) -> str:
    return " ".join(shlex.quote(str(v)) for v in value) if isinstance(value, list) else str(value)


def _config_sections(path: str, text: str) -> Sections | None:
    """The sections of a configuration file that can be about the test run, as
    ``{section: {key: value}}``; None when the text does not parse."""
    if PurePosixPath(path).name != "pyproject.toml":
        sections = _ini_sections(text)
        if sections is None:
            return None
        return {s: kv for s, kv in sections.items() if s in PYTEST_SECTIONS or is_tox_section(s)}
    if tomllib is None:
        return None
    try:
        data = tomllib.loads(text)
    except (ValueError, TypeError):
        return None
    tool = data.get("tool", {})
    tool = tool if isinstance(tool, dict) else {}
    table = tool.get("pytest", {})
    out: Sections = {}
    if not isinstance(table, dict):
        out["tool.pytest"] = {"<value>": repr(table)}
    else:
        for key, value in table.items():
            if key == "ini_options" and isinstance(value, dict):
                out["tool.pytest.ini_options"] = {k: _toml_value(v) for k, v in value.items()}
            else:  # pytest 9's native [tool.pytest] table
                out.setdefault("tool.pytest", {})[key] = _toml_value(value)
    tox = tool.get("tox", {})
    legacy = tox.get("legacy_tox_ini") if isinstance(tox, dict) else None
    if isinstance(legacy, str):  # tox's configuration, as an ini text inside pyproject
        inner = _ini_sections(legacy)
        if inner is None:
            out["tool.tox"] = {"legacy_tox_ini": legacy}
        else:
            out.update({f"tox.ini:{s}": kv for s, kv in inner.items() if is_tox_section(s)})
    return out


def _section_diff(path: str, old: Sections, new: Sections) -> list[str]:
    reasons: list[str] = []
    for section in sorted(set(old) | set(new)):
        a, b = old.get(section), new.get(section)
        plain = section.removeprefix("tox.ini:")
        if section == "tool.tox":
            if a != b:
                reasons.append(f"changes the tox configuration in {path}")
            continue
        role = "pytest" if plain in PYTEST_SECTIONS else "tox"
        if role == "pytest" and (a is None) != (b is None):
            verb = "adds" if a is None else "removes"
            reasons.append(f"{verb} the pytest section [{plain}] of {path}")
        a, b = a or {}, b or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                reasons += judge_key(path, role, key, a.get(key), b.get(key))
    return reasons


def _section_header(text: str) -> str | None:
    """The section named by a header line (``[pytest]``, ``[[tool.x]]``, with an optional
    trailing comment); None for any other line."""
    line = text.strip()
    if not line.startswith("["):
        return None
    end = line.find("]")
    if end < 0:
        return None
    name = line[1:end].lstrip("[").strip()
    rest = line[end:].lstrip("]").strip()
    if not name or (rest and not rest.startswith(("#", ";"))):
        return None
    return name


def _key_line(text: str) -> tuple[str, str] | None:
    """``(key, value)`` for a line that starts a key at column 0 (``key = value``,
    ``key: value``, ``key=value``); None for a continuation, a comment or anything else."""
    if not text or not (text[0].isalpha() or text[0] == "_"):
        return None
    cut = len(text)
    for sep in ("=", ":"):
        at = text.find(sep)
        if 0 <= at < cut:
            cut = at
    if cut == len(text):
        return None
    key = text[:cut].strip()
    if not key or any(not (c.isalnum() or c in "_.-") for c in key):
        return None
    return key, text[cut + 1 :].strip()


def _hunk_side(hunk: Hunk, side: str, section: str | None):
    """One side (``"-"``: old, ``"+"``: new) of a hunk as ``{(section, key): value}`` and
    the set of ``(section, key)`` whose lines this side changes; a changed header line comes
    back as ``(section, "<header>")``."""
    values: dict[tuple[str | None, str | None], list[str]] = {}
    changed: set[tuple[str | None, str | None]] = set()
    key: str | None = None
    for kind, raw in hunk.lines:
        if kind not in (" ", side):
            continue
        text = raw.rstrip("\r\n")
        header = _section_header(text)
        if header is not None:
            section, key = header, None
            if kind != " ":
                changed.add((section, "<header>"))
            continue
        if text.lstrip().startswith(("#", ";")) or not text.strip():
            continue
        keyed = _key_line(text)
        if keyed:
            key, value = keyed
            values.setdefault((section, key), []).append(value)
        else:
            values.setdefault((section, key), []).append(text.strip())
        if kind != " ":
            changed.add((section, key))
    return {k: "\n".join(v) for k, v in values.items()}, changed


def _hunk_config_reasons(path: str, hunks: list[Hunk]) -> list[str]:
    """The same judgement from hunks alone (see the notes in :mod:`.tampering_options`)."""
    reasons: list[str] = []
    for hunk in hunks:
        section = _section_header(hunk.section or "")
        old, old_changed = _hunk_side(hunk, "-", section)
        new, new_changed = _hunk_side(hunk, "+", section)
        for where in sorted(old_changed | new_changed, key=str):
            sec, key = where
            if key == "<header>":
                if sec in PYTEST_SECTIONS:
                    reasons.append(f"changes the pytest section [{sec}] of {path}")
                continue
            if old.get(where) == new.get(where):
                continue
            role = key_role(path, sec, key)
            if role is None:
                continue
            if key is None:  # a continuation whose key is above the hunk
                reasons.append(f"changes {role} configuration in {path}")
                continue
            reasons += judge_key(path, role, key, old.get(where), new.get(where))
    return reasons


def config_edit_reasons(changed: ChangedFile, hunks: list[Hunk]) -> list[str]:
    """The edits of a runner configuration file that can change which tests run or how
    their outcomes are read (see the notes above); whole files when known, hunks
    otherwise."""
    path = changed.path
    if changed.status == "deleted":
        if changed.before is None:
            return [f"deletes runner configuration {path}"]
        sections = _config_sections(path, changed.before)
        return [f"deletes runner configuration {path}"] if sections or sections is None else []
    if changed.after is not None and (changed.before is not None or changed.status == "added"):
        old = _config_sections(path, changed.before or "")
        new = _config_sections(path, changed.after)
        if old is not None and new is not None:
            return list(dict.fromkeys(_section_diff(path, old, new)))
    return list(dict.fromkeys(_hunk_config_reasons(path, hunks)))
