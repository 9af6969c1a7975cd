"""Environments whose observation is a variable-size *set* of items (no model is defined here).

A set observation is held on device as a fixed-capacity array with a validity flag per slot and
flattened: ``[capacity * (item_width + 1)]`` float32, slot ``i`` at
``[i * (item_width + 1), (i + 1) * (item_width + 1))`` with its features first and its validity
flag (1.0 / 0.0) last. Such an env sets ``set_layout = (capacity, item_width)``; the
permutation-invariant encoder (``network.encoder=set``) reads it. Features of empty slots are
zeros, but the encoder must not depend on them (it masks by the flag).
"""
