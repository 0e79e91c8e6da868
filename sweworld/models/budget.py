"""Prompt budgets shared by SWT and SWR: token counting, deterministic truncation (whole
lines around a ``... [N lines cut] ...`` marker) and budgets shared among parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sweworld.models.base import approx_tokens

TokenCounter = Callable[[str], int]

# ------------------------------------------------------------------------------------------
# Truncation
# ------------------------------------------------------------------------------------------


def _marker(n: int) -> str:
    return f"... [{n} lines cut] ..."


class LineTokens:
    """A token counter with a per-line cache (budgets are spent line by line)."""

    def __init__(self, counter: TokenCounter):
        self.counter = counter
        self._cache: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return int(self.counter(text))

    def line(self, line: str) -> int:
        cost = self._cache.get(line)
        if cost is None:
            cost = int(self.counter(line + "\n"))
            self._cache[line] = cost
        return cost

    def lines(self, lines: Iterable[str]) -> int:
        return sum(self.line(line) for line in lines)


def split_text_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def truncate_lines(
    text: str, budget: int, counter: TokenCounter = approx_tokens
) -> tuple[str, int]:
    """Cut ``text`` to at most ``budget`` tokens: whole lines, head and tail kept around a
    ``... [N lines cut] ...`` marker. Returns the text and the number of lines cut."""
    tok = counter if isinstance(counter, LineTokens) else LineTokens(counter)
    return truncate_text(text, budget, tok)


def truncate_text(text: str, budget: int, tok: LineTokens) -> tuple[str, int]:
    if not text:
        return "", 0
    if tok(text) <= budget:
        return text, 0
    lines = split_text_lines(text)
    n = len(lines)
    if budget <= 0 or tok(_marker(n)) > budget:
        return "", n
    costs = [tok.line(line) for line in lines]
    avail = budget - tok.line(_marker(n))
    for _ in range(32):
        head_budget = avail // 2
        used = 0
        h = 0
        while h < n and used + costs[h] <= head_budget:
            used += costs[h]
            h += 1
        t = 0
        while t < n - h and used + costs[n - 1 - t] <= avail:
            used += costs[n - 1 - t]
            t += 1
        while h < n - t and used + costs[h] <= avail:
            used += costs[h]
            h += 1
        cut = n - h - t
        if cut == 0:  # the per-line costs fit, the whole text does not: cut one more line
            if t:
                t -= 1
            elif h:
                h -= 1
            cut = 1
        kept = [*lines[:h], _marker(cut), *lines[n - t :]]
        result = "\n".join(kept)
        over = tok(result) - budget
        if over <= 0:
            return result, cut
        avail -= max(over, 1)
        if avail <= 0:
            break
    return _marker(n), n


def truncate_chars(text: str, budget: int, tok: LineTokens) -> tuple[str, int]:
    """Cut a single line by characters (head and tail kept); returns characters cut."""
    if tok(text) <= budget:
        return text, 0
    lo, hi = 0, len(text)
    best = ""
    best_cut = len(text)
    while lo <= hi:  # largest kept length whose result fits
        keep = (lo + hi) // 2
        head = text[: (keep + 1) // 2]
        tail = text[len(text) - keep // 2 :] if keep // 2 else ""
        cut = len(text) - len(head) - len(tail)
        candidate = f"{head} ... [{cut} chars cut] ... {tail}".rstrip()
        if tok(candidate) <= budget:
            best, best_cut = candidate, cut
            lo = keep + 1
        else:
            hi = keep - 1
    return best, best_cut


def waterfill(demands: Sequence[int], weights: Sequence[float], cap: int) -> list[int]:
    """Share ``cap`` between items: each gets at most its demand, the rest in proportion to
    its weight (deterministic; the result sums to at most ``cap``)."""
    alloc = [0] * len(demands)
    if sum(demands) <= cap:
        return list(demands)
    active = [i for i, d in enumerate(demands) if d > 0 and weights[i] > 0]
    remaining = float(cap)
    while active:
        wsum = sum(weights[i] for i in active)
        share = remaining / wsum
        done = [i for i in active if demands[i] <= share * weights[i]]
        if not done:
            for i in active:
                alloc[i] = int(share * weights[i])
            break
        for i in done:
            alloc[i] = demands[i]
            remaining -= demands[i]
        finished = set(done)
        active = [i for i in active if i not in finished]
    return alloc


@dataclass(frozen=True)
class Part:
    """One piece of a multi-part field: a header line (may be empty) and a body."""

    header: str
    body: str
    label: str = ""  # what the "not shown" note calls it


MIN_PART_BODY = 24


def fit_parts(parts: Sequence[Part], budget: int, tok: LineTokens) -> tuple[str, int]:
    """Fit parts into ``budget``: parts smaller than an even share are kept whole, the others
    are cut to the share; parts that would get almost nothing are left out with a note."""
    parts = [p for p in parts if p.header or p.body]
    if not parts or budget <= 0:
        return "", sum(len(split_text_lines(p.body)) for p in parts)
    # each part counted once (not once per round: 4,000 parts took seconds, quadratically)
    all_headers = [tok.line(p.header) if p.header else 0 for p in parts]
    all_demands = [
        h + (tok(p.body) if p.body else 0) for h, p in zip(all_headers, parts, strict=True)
    ]
    # A part shown gets at least min(demand, header + MIN_PART_BODY) or is starved, so no
    # more parts than those minimums (and a separator each) fit in the budget can be shown
    # without one starving: start the search there rather than at every part.
    fitting, need = 0, 0
    for h, d in zip(all_headers, all_demands, strict=True):
        need += min(d, h + MIN_PART_BODY) + 1
        if need > budget:
            break
        fitting += 1
    shown = list(parts[: max(fitting, 1)])
    while True:
        dropped = parts[len(shown) :]
        note = ""
        if dropped:
            names = ", ".join(p.label or p.header for p in dropped)
            note = f"({len(dropped)} more not shown: {names})"
            note, _ = truncate_chars(note, max(budget // 4, 8), tok)
        avail = budget - (tok(note) + 1 if note else 0) - len(shown)  # blank separators
        headers = all_headers[: len(shown)]
        demands = all_demands[: len(shown)]
        alloc = waterfill(demands, [1.0] * len(shown), max(avail, 0))
        starved = [
            i
            for i, (a, d) in enumerate(zip(alloc, demands, strict=True))
            if a < d and a - headers[i] < MIN_PART_BODY
        ]
        if starved and len(shown) > 1:
            shown = shown[:-1]
            continue
        break
    chunks: list[str] = []
    cut_total = sum(len(split_text_lines(p.body)) + 1 for p in dropped)
    for part, a, d, h in zip(shown, alloc, demands, headers, strict=True):
        body = part.body
        if a < d:
            body, cut = truncate_text(body, max(a - h, 0), tok)
            cut_total += cut
        chunk = f"{part.header}\n{body}" if part.header else body
        chunks.append(chunk.rstrip("\n"))
    if note:
        chunks.append(note)
    text, cut = truncate_text("\n\n".join(chunks), budget, tok)
    return text, cut_total + cut


def patch_parts(patch: str) -> list[Part]:
    """One :class:`Part` per file of a unified diff (the whole text when it does not split)."""
    from sweworld.tasks.patches import PatchError, split_patch

    try:
        pieces = split_patch(patch)
    except (PatchError, ValueError, IndexError, KeyError):
        pieces = []
    if not pieces:
        return [Part("", patch, "patch")] if patch else []
    return [Part("", p.text, p.path) for p in pieces]
