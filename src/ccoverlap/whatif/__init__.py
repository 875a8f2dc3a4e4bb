"""What-if: predict each lever's effect on one captured step, here and on GPUs we do not have (docs/whatif.md).

A step is data (`step`); the simulator dispatches it CTA by CTA (`dispatch`) under the residency rules
(`residency`), each CTA running at its alone pace slowed by what shares its SM and the memory system
(`duration`, fitted once per GPU by `calibration`); levers are transformations of the step (`transforms`,
declared with each lever in control/levers.py); `presets` move a step to another GPU, bus bandwidth or world
size; `predict` runs them all, `session` goes from a capture folder to predictions.
"""
