"""An on-disk cache for slow, deterministic work (NVRTC builds, cuobjdump readings), so that the
fresh processes of a bench (one set per strategy) do not each redo it. Lives in $CCOVERLAP_CACHE,
else ~/.cache/ccoverlap; a cache that cannot be read or written is simply not used."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path


def directory() -> Path:
    return Path(os.environ.get("CCOVERLAP_CACHE") or Path.home() / ".cache" / "ccoverlap")


def cached(kind: str, key: str, make: Callable[[], bytes]) -> bytes:
    """`make()`'s bytes, from the cache when `key` (everything the result depends on) was seen."""
    path = directory() / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}"
    try:
        return path.read_bytes()
    except OSError:
        pass
    data = make()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)  # concurrent writers: the last complete file wins
    except OSError:
        pass
    return data
