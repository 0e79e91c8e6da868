"""The exact, cheap stages of SWR: syntax, type check, semantic equivalence.

Imports: what :mod:`sweworld.reward` may import, and reward's own modules. Helpers two
stages share live in a module of their own (:mod:`.common_text`), so no stage imports
another in a circle.
"""

from sweworld.reward.stages.semantic import SemanticStage
from sweworld.reward.stages.syntax import SyntaxStage
from sweworld.reward.stages.typecheck import TypecheckStage

__all__ = ["SemanticStage", "SyntaxStage", "TypecheckStage"]
