"""The world service: episodes over HTTP (see :mod:`sweworld.serve.world.schemas` for the
wire format and the routes).

Imports: :mod:`sweworld.env`, :mod:`sweworld.world` (one World per distinct episode
config: :mod:`.components`) and the lower layers; not the Python client
(:mod:`sweworld.serve.client`, :mod:`sweworld.serve.remote`).
"""
