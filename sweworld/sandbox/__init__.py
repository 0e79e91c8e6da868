"""The sandbox: copy-on-write workspaces, the command router, R2E-Gym tools and sessions.

Imports: :mod:`sweworld.tasks` (and the layer-free ``dirs``, ``pyast``, ``console``).
Executors are defined by their caller here (:mod:`.executor`) and found by short name
through the registry's entry points (:mod:`.registry`), never imported by name.
"""
