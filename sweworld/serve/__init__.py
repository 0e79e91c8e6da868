"""Serving: the SWT/SWR models through vLLM, and the world as a network service.

========================  ===============================================================
``model``                 ``sweworld serve model``: launches vLLM's OpenAI-compatible
                          server for a base model with the ``swt`` and ``swr`` adapters
                          (presets: 4 x RTX 3090 FP16, CPU), waits for health, stops cleanly
``world``                 ``sweworld serve world``: episodes and sessions over HTTP
                          (FastAPI; bearer tokens, quotas, idle expiry, metrics)
``client``                the Python client of the world service (a remote ``Episode``)
========================  ===============================================================

Nothing here is imported by ``import sweworld``; FastAPI, uvicorn and vLLM are optional
(extra ``serve``; vLLM itself in its own environment, see ``model``).

Imports: the lower layers, :mod:`sweworld.world` and :mod:`sweworld.env` (the service is
built on episodes; env never imports serve). Inside: ``transport`` <- ``remote`` <-
``client``, one way.
"""
