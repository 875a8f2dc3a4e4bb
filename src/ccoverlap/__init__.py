"""ccoverlap: make computation and collective communication really overlap on GPUs.

The foundation is an exact model of what fits on one SM (`occupancy`), the
hardware limits it needs (`limits`), kernel footprints (`footprint`) and the
resource-aware pad planner (`planner`), which sizes occupancy shaping against
the real footprint of the communication kernel (`nccl`). `enable(policy)` applies a tuned policy
(`ccoverlap tune`) inside a running script.
"""
from ccoverlap.util.errors import UsageError
from ccoverlap.model.footprint import KernelFootprint
from ccoverlap.model.limits import DeviceLimits, get_device
from ccoverlap.model.occupancy import Occupancy, Resource, occupancy, resident_blocks
from ccoverlap.model.planner import Plan, plan

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
    "enable",
]


def __getattr__(name: str):
    """`ccoverlap.enable` (control.policy.enable), imported on first use, so that `import ccoverlap` stays light."""
    if name == "enable":
        from ccoverlap.control.policy import enable

        return enable
    raise AttributeError(f"module 'ccoverlap' has no attribute {name!r}")
