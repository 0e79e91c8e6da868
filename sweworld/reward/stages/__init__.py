"""The exact, cheap stages of SWR: syntax, type check, semantic equivalence."""

from sweworld.reward.stages.semantic import SemanticStage
from sweworld.reward.stages.syntax import SyntaxStage
from sweworld.reward.stages.typecheck import TypecheckStage

__all__ = ["SemanticStage", "SyntaxStage", "TypecheckStage"]
