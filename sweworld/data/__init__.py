"""Datasets of real transitions and labels: the schema, importers, collection, the task
factory. See :mod:`sweworld.data.schema` for the record kinds and
:mod:`sweworld.data.store` for how they are written and split by repository."""
