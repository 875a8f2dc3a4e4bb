"""Bindings to the GPU stack (the CUDA driver, NVRTC) and the provenance of a run (GPU, driver, CUDA, torch, NCCL)."""
