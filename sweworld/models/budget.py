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


#: Most characters one token is taken to cover when a text is far over its budget: past
#: ``budget * CHARS_PER_TOKEN_BOUND`` characters from each end, the middle of a text is cut
#: without being read or tokenised, so that cutting a 50 MB text to a few hundred tokens
#: costs what cutting a few kilobytes does (the model's tokenizer, counting a whole 50 MB
#: problem statement at every budget the context builder tried, took minutes). A text whose
#: tokens average more characters than this (long runs of one character) keeps fewer tokens
#: than its budget allows, never more.
CHARS_PER_TOKEN_BOUND = 16


def _window(budget: int) -> int:
    """Characters kept from each end of a text before it is counted (see above)."""
    return max(budget, 1) * CHARS_PER_TOKEN_BOUND


def capped_count(text: str, budget: int, tok: TokenCounter) -> int:
    """``tok(text)``, or ``budget + 1`` without counting when ``text`` is too long to fit
    ``budget`` by :data:`CHARS_PER_TOKEN_BOUND` (a demand only compared with budgets)."""
    if len(text) > 2 * _window(budget):
        return budget + 1
    return int(tok(text))


def _ends(text: str, window: int) -> tuple[list[str | None], int]:
    """The whole lines within ``window`` characters of either end of ``text``, with
    ``None`` standing for the lines between (never kept), and how many lines those are."""
    head_end = text.rfind("\n", 0, window)  # the head: whole lines before this newline
    newline = text.find("\n", len(text) - window)
    tail_start = len(text) if newline < 0 else newline + 1  # the tail: whole lines after
    head_end = min(head_end, tail_start - 1)
    middle_start = head_end + 1
    hidden = text.count("\n", middle_start, tail_start)
    if tail_start > middle_start and text[tail_start - 1] != "\n":
        hidden += 1  # a last line without its newline
    head = text[:head_end].split("\n") if head_end >= 0 else []
    tail = split_text_lines(text[tail_start:])
    return [*head, None, *tail], hidden


def truncate_text(text: str, budget: int, tok: LineTokens) -> tuple[str, int]:
    if not text:
        return "", 0
    window = _window(budget)
    hidden = 0
    lines: list[str | None]
    unread = len(text) > 2 * window
    if unread:  # far over the budget: only the ends are read
        lines, hidden = _ends(text, window)
    elif tok(text) <= budget:
        return text, 0
    else:
        lines = list(split_text_lines(text))
    n = len(lines)
    total = n - 1 + hidden if unread else n  # lines of the whole text
    if budget <= 0 or tok(_marker(total)) > budget:
        return "", total
    # the stand-in for the unread middle costs more than the budget: it is always cut
    costs = [budget + 1 if line is None else tok.line(line) for line in lines]
    extra = total - n  # cut lines beyond those the stand-in counts as one
    avail = budget - tok.line(_marker(total))
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
        cut += extra
        kept = [*lines[:h], _marker(cut), *lines[n - t :]]
        result = "\n".join(line for line in kept if line is not None)
        over = tok(result) - budget
        if over <= 0:
            return result, cut
        avail -= max(over, 1)
        if avail <= 0:
            break
    return _marker(total), total


def truncate_chars(text: str, budget: int, tok: LineTokens) -> tuple[str, int]:
    """Cut a single line by characters (head and tail kept); returns characters cut. At
    most ``2 * budget * CHARS_PER_TOKEN_BOUND`` characters are ever counted."""
    longest = 2 * _window(budget)
    if len(text) <= longest and tok(text) <= budget:
        return text, 0
    lo, hi = 0, min(len(text), longest)
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
        h + (capped_count(p.body, budget, tok) if p.body else 0)
        for h, p in zip(all_headers, parts, strict=True)
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
