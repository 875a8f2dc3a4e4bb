"""The single-GPU contention lab: compute and communication-proxy kernels under every strategy.

`ccoverlap.lab.kernels` builds the CUDA kernels (NVRTC), `workloads` wraps compute families and proxies,
`strategies` says what each strategy changes, `runner` times them with CUDA events,
`metrics` turns samples into rows, `plots` draws them (matplotlib, Agg).
"""
