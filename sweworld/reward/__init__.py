"""Rewards: the real verifier (ground truth) now; SWR's learned stages next."""
