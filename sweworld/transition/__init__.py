"""SWT: the transition model that predicts what running a command would print.

Imports: tasks, sandbox, execution, models; never :mod:`sweworld.reward` (its peer)
nor anything above. Its executors are registered as entry points, built by
:mod:`sweworld.world`.
"""
