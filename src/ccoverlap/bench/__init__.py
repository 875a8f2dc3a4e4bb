"""The workload suite (`ccoverlap bench`): real torch.distributed training steps under each strategy.

`config` validates what to run (no torch needed), `strategies` says what each one
changes (environment, process-group options, interposer), `models` and `workloads`
build the steps, `worker` runs one rank, `launcher` spawns fresh ranks per strategy
and compares their results.
"""
