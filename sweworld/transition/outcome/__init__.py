"""The outcome model: an execution step's result decided by a classifier, written by a renderer.

* :mod:`.state`: read-only current/base views of a workspace state (live or rebuilt);
* :mod:`.features`: exact, bounded features of a command on a state (command, diff,
  parse/import reachability, oracle relation to the gold patch, the session's ledger);
* :mod:`.model`: the heads (exit class, exception type, per-test status), exported from
  scikit-learn to JSON and evaluated with numpy (no pickle);
* :mod:`.collect`: the tests a command collects (one function for the executor, the
  training labels and the benchmarks); :mod:`.graded`: the task's graded tests decided once
  (one state, one truth); :mod:`.fixtures`: tests that certainly error at setup on a fixture
  pytest cannot resolve (exact, where the environment's plugins are known);
* :mod:`.render`: pytest output and Python tracebacks from a predicted outcome;
* :mod:`.executor`: :class:`OutcomeExecutor`, the Executor protocol over all of it
  (registered as ``outcome``).

Training rows and ``sweworld train outcome`` live in :mod:`sweworld.train.outcome`.
"""

from sweworld.transition.outcome.model import ModelFileError, OutcomeModel

__all__ = ["ModelFileError", "OutcomeModel"]
