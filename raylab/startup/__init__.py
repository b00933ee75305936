"""Start-up progress with an honest ETA: which phase a starting cluster is in, how long
that phase usually takes here (from the last starts raylab remembers), and a line when
one takes twice that, with the reason the backend gives."""

from .eta import EtaView, PhaseClock
from .history import PhaseHistory
from .phases import startup_phase

__all__ = ["EtaView", "PhaseClock", "PhaseHistory", "startup_phase"]
