"""Standby clusters: one per user and GPU type, made before the user asks, so that the
`up` that asks for that shape gets a cluster that is already up.

A standby is an ordinary cluster of its owner's with an end time (`standby_until`):
never shared, never reused, counted in the owner's quota and GPU-hours, never
idle-suspended, deleted at its end or when the owner's server stops. `up` claims it in
one conditional write (`Backend.claim`). The shapes are the admin's (`c.Raylab.standby`);
the server keeps them (server/standby_keeper.py).
"""

from .claims import claim_standby, make_room
from .shapes import same_shape, standby_specs, unusable

__all__ = [
    "claim_standby",
    "make_room",
    "same_shape",
    "standby_specs",
    "unusable",
]
