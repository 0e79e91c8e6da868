"""The task factory (``sweworld data make-tasks``): SWE-smith's idea without Docker.

A pure-Python library (an sdist from the package index, or a local repository) gets its
environment built by the LocalExecutor's machinery and its tests run for real; bugs are
injected by ``ast``-located text edits (:mod:`.mutate`), mutants that break some but not
most tests are kept (:mod:`.tasks`), and each becomes a verified SWE-bench shaped task
(gold patch = the inverse diff) with an issue text (:mod:`.issue_text`), real SWT
transitions of what agents run (:mod:`.transitions`) and real SWR labels for right,
partial and wrong patches (:mod:`.labels`). :mod:`.pipeline` runs it, :mod:`.cli` is the
sub-command.

Imports: what :mod:`sweworld.data` may import, and data's own modules.
"""
