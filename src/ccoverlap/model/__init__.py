"""The resource model: per-SM limits, kernel footprints, exact occupancy, the pad planner, NCCL's footprint."""
