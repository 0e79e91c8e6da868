"""The world service: episodes over HTTP (see :mod:`sweworld.serve.world.schemas` for the
wire format and the routes)."""
