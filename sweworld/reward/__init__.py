"""Rewards: the real verifier (ground truth) now; SWR's learned stages next.

Imports: tasks, sandbox, execution, models and transition (the verdict reads the world's
outcome model); never env, serve, data, bench, the CLI or :mod:`sweworld.world`.
"""
