"""SWR's learned part: the prompt, the answer format and its parser (stage 4, simulated tests).

- :func:`build_swr_prompt`: the versioned prompt
  (:data:`SWR_FORMAT_VERSION`), oracle or blind, with per-section token budgets
  (:class:`SWRPromptConfig`, :data:`EMBEDDED_SWR_CONFIG` for the embedded model);
- :func:`swr_target`: the answer a model is trained to write,
  ``{"tests": {"<id>": "PASSED", ...}, "resolved": true}``;
- :func:`parse_swr_output`: that answer read back from a model's text, repaired, never
  raising (:class:`ParsedReport`);
- :func:`constrained_reports`: reports written by choosing each listed test's status with
  the LM's ``choice_logprobs`` (oracle mode; always well formed).

The stage that runs the model and grades its reports is
:class:`sweworld.reward.stages.simulated_tests.SimulatedTestsStage`.

Imports: what :mod:`sweworld.reward` may import, and reward's own modules.
"""

from sweworld.reward.swr.decoding import RESOLVED_CHOICES, STATUS_CHOICES, constrained_reports
from sweworld.reward.swr.parsing import STATUSES, ParsedReport, normalize_status, parse_swr_output
from sweworld.reward.swr.prompt import (
    EMBEDDED_SWR_CONFIG,
    SWR_FORMAT_VERSION,
    SWR_PREFILL,
    SWR_REASONING_PREFILL,
    SWRPrompt,
    SWRPromptConfig,
    build_swr_prompt,
    swr_resolved_prefix,
    swr_status_prefix,
    swr_system_prompt,
    swr_target,
)

__all__ = [
    "EMBEDDED_SWR_CONFIG",
    "RESOLVED_CHOICES",
    "STATUSES",
    "STATUS_CHOICES",
    "SWR_FORMAT_VERSION",
    "SWR_PREFILL",
    "SWR_REASONING_PREFILL",
    "ParsedReport",
    "SWRPrompt",
    "SWRPromptConfig",
    "build_swr_prompt",
    "constrained_reports",
    "normalize_status",
    "parse_swr_output",
    "swr_resolved_prefix",
    "swr_status_prefix",
    "swr_system_prompt",
    "swr_target",
]
