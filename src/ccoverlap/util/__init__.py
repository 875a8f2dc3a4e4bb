"""Utilities with no GPU and no policy in them: errors, the cache, plotting, statistics, timing, the profiler
recorder."""
