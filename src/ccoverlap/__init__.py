"""ccoverlap: make computation and collective communication really overlap on GPUs.

The foundation is an exact model of what fits on one SM (`occupancy`), the
hardware limits it needs (`limits`), kernel footprints (`footprint`) and the
resource-aware pad planner (`planner`), which sizes occupancy shaping against
the real footprint of the communication kernel (`nccl`).
"""
from ccoverlap.errors import UsageError
from ccoverlap.footprint import KernelFootprint
from ccoverlap.limits import DeviceLimits, get_device
from ccoverlap.occupancy import Occupancy, Resource, occupancy, resident_blocks
from ccoverlap.planner import Plan, plan

__version__ = "0.1.0"
__all__ = [
    "DeviceLimits",
    "KernelFootprint",
    "Occupancy",
    "Plan",
    "Resource",
    "UsageError",
    "get_device",
    "occupancy",
    "plan",
    "resident_blocks",
]
