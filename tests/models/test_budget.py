"""Prompt budgets: :func:`fit_parts` is linear in the number of parts and gives the same
result as the round-by-round search it replaced."""

from __future__ import annotations

import random
import time

from sweworld.models.base import approx_tokens
from sweworld.models.budget import (
    MIN_PART_BODY,
    LineTokens,
    Part,
    fit_parts,
    patch_parts,
    split_text_lines,
    truncate_chars,
    truncate_text,
    waterfill,
)


def reference_fit_parts(parts, budget, tok):
    """The search before: every round re-counts every part and drops one."""
    parts = [p for p in parts if p.header or p.body]
    if not parts or budget <= 0:
        return "", sum(len(split_text_lines(p.body)) for p in parts)
    shown = list(parts)
    while True:
        dropped = parts[len(shown) :]
        note = ""
        if dropped:
            names = ", ".join(p.label or p.header for p in dropped)
            note = f"({len(dropped)} more not shown: {names})"
            note, _ = truncate_chars(note, max(budget // 4, 8), tok)
        avail = budget - (tok(note) + 1 if note else 0) - len(shown)
        headers = [tok.line(p.header) if p.header else 0 for p in shown]
        demands = [h + (tok(p.body) if p.body else 0) for h, p in zip(headers, shown, strict=True)]
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
    chunks = []
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


def test_fit_parts_gives_what_the_round_by_round_search_gave():
    rng = random.Random(0)
    tok = LineTokens(approx_tokens)
    for _ in range(300):
        parts = [
            Part(
                header=rng.choice(["", f"# file {i}"]),
                body="".join(
                    f"line {j} {'x' * rng.randrange(60)}\n" for j in range(rng.randrange(12))
                ),
                label=f"f{i}.py",
            )
            for i in range(rng.randrange(1, 25))
        ]
        budget = rng.randrange(0, 900)
        assert fit_parts(parts, budget, tok) == reference_fit_parts(parts, budget, tok)


def test_fit_parts_is_linear_in_the_number_of_parts():
    """A patch of 4,000 new files took 6 s in the SWR prompt (16,000: minutes), and an
    agent's diff of that many files slowed every simulated step the same way."""
    tok = LineTokens(approx_tokens)

    def seconds(n: int) -> float:
        patch = "".join(
            f"diff --git a/m{i}.py b/m{i}.py\nnew file mode 100644\n--- /dev/null\n"
            f"+++ b/m{i}.py\n@@ -0,0 +1 @@\n+x = {i}\n"
            for i in range(n)
        )
        parts = patch_parts(patch)
        assert len(parts) == n
        started = time.perf_counter()
        text, cut = fit_parts(parts, 4000, tok)
        elapsed = time.perf_counter() - started
        assert "more not shown" in text and cut > 0
        return elapsed

    small, large = seconds(2000), seconds(8000)
    assert large < 2.0, large
    assert large < 8 * small + 0.3, (small, large)
