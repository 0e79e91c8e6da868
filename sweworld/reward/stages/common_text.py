"""Line helpers the reward stages share (the semantic stage and the tampering check both
read code lines without their comments); imports nothing of sweworld, so any stage may
import it without a circle."""

from __future__ import annotations

import io
import tokenize

__all__ = ["strip_comment"]


def strip_comment(line: str) -> str:
    """``line`` without a trailing comment (tokenize decides what is a comment)."""
    if "#" not in line:
        return line
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                return line[: token.start[1]]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return line
