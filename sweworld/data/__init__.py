"""Datasets of real transitions and labels: the schema, importers, collection, the task
factory. See :mod:`sweworld.data.schema` for the record kinds and
:mod:`sweworld.data.store` for how they are written and split by repository.

Imports: any lower layer (tasks ... reward) and :mod:`sweworld.world`, which builds the
executors and models a spec names; never :mod:`sweworld.serve`.
"""
