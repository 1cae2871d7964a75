"""What an offline run returns: ``SimRun`` and ``SimulationError``, shared by ``hil sim``'s
lockstep loop (rt.sim) and a model's own offline run (PlantModel.offline)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class SimulationError(RuntimeError):
    """The plant state became invalid during a run; ``arrays`` holds the rows up to then."""

    def __init__(self, message: str, arrays: dict, plant=None):
        super().__init__(message)
        self.arrays = arrays
        self.plant = plant          # the plant that ran (None: a model's own offline run)


@dataclass
class SimRun:
    """Result of an offline run: the arrays and what the run cost."""

    arrays: dict = field(default_factory=dict)
    stepping_seconds: float = 0.0   # wall time of the stepping alone
    startup_seconds: float = 0.0    # kernel compilation or cache load before the first step
    plant: Any = None               # the plant that ran (its params: diagnostics of rows)
