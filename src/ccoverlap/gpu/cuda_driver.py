"""Thin ctypes binding to the CUDA driver (libcuda), only the calls ccoverlap needs.

ctypes instead of a CUDA Python package keeps the core importable anywhere and
lets tests substitute a fake driver object with the same methods.
"""
from __future__ import annotations

import ctypes
from functools import cache

# cuda.h enums (CUDA 13.0 headers)
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_WARP_SIZE = 10
ATTR_MAX_REGISTERS_PER_BLOCK = 12
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR = 82
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
ATTR_MAX_BLOCKS_PER_MULTIPROCESSOR = 106
ATTR_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
ATTR_CLUSTER_LAUNCH = 120

FUNC_MAX_THREADS_PER_BLOCK = 0
FUNC_SHARED_SIZE_BYTES = 1
FUNC_NUM_REGS = 4
FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
FUNC_PREFERRED_SHARED_MEMORY_CARVEOUT = 9  # what the interposer's `carveout` sets
FUNC_REQUIRED_CLUSTER_WIDTH = 11

#: Shared memory a block may use before FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES is raised (static + dynamic).
DEFAULT_SMEM_PER_BLOCK = 48 * 1024

LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
STREAM_NON_BLOCKING = 1
MEMHOSTALLOC_PORTABLE = 0x01
MEMHOSTALLOC_DEVICEMAP = 0x02


class _LaunchAttribute(ctypes.Structure):
    # CUlaunchAttribute: id, pad to 8 bytes, then a 64-byte value union (clusterDim is x, y, z)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
        ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("num_attrs", ctypes.c_uint),
    ]


class CudaError(RuntimeError):
    """A driver call returned an error code."""


class Driver:
    """The CUDA driver API through ctypes; each method raises CudaError on failure."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        self._check("cuInit", lib.cuInit(0))

    def _check(self, call: str, rc: int) -> None:
        if rc != 0:
            msg = ctypes.c_char_p()
            self._lib.cuGetErrorString(rc, ctypes.byref(msg))
            text = msg.value.decode() if msg.value else "unknown error"
            raise CudaError(f"{call} failed: {text} ({rc})")

    def _int(self, call: str, *args) -> int:
        value = ctypes.c_int()
        self._check(call, getattr(self._lib, call)(ctypes.byref(value), *args))
        return value.value

    def device_count(self) -> int:
        return self._int("cuDeviceGetCount")

    def device(self, ordinal: int) -> int:
        return self._int("cuDeviceGet", ordinal)

    def device_attribute(self, attr: int, device: int) -> int:
        return self._int("cuDeviceGetAttribute", attr, device)

    def device_name(self, device: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self._check("cuDeviceGetName", self._lib.cuDeviceGetName(buf, 256, device))
        return buf.value.decode()

    def driver_version(self) -> int:
        return self._int("cuDriverGetVersion")

    def use_primary_context(self, device: int) -> None:
        """Make `device`'s primary context current (retained for the life of the process)."""
        ctx = ctypes.c_void_p()
        self._check("cuDevicePrimaryCtxRetain", self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device))
        self._check("cuCtxSetCurrent", self._lib.cuCtxSetCurrent(ctx))

    def stream_priority_range(self, device: int) -> tuple[int, int]:
        """(least, greatest) for `device`; needs its primary context, which it retains."""
        self.use_primary_context(device)
        least, greatest = ctypes.c_int(), ctypes.c_int()
        self._check(
            "cuCtxGetStreamPriorityRange",
            self._lib.cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)),
        )
        return least.value, greatest.value

    def function_attribute(self, attr: int, handle: int) -> int:
        return self._int("cuFuncGetAttribute", attr, ctypes.c_void_p(handle))

    def kernel_attribute(self, attr: int, handle: int, device: int) -> int:
        return self._int("cuKernelGetAttribute", attr, ctypes.c_void_p(handle), device)

    def set_function_attribute(self, attr: int, handle: int, value: int) -> None:
        self._check("cuFuncSetAttribute", self._lib.cuFuncSetAttribute(ctypes.c_void_p(handle), attr, value))

    def set_kernel_attribute(self, attr: int, handle: int, value: int, device: int) -> None:
        self._check(
            "cuKernelSetAttribute", self._lib.cuKernelSetAttribute(attr, value, ctypes.c_void_p(handle), device)
        )

    def load_kernels(self, image: bytes, names: list[str]) -> dict[str, int]:
        """Load a cubin as a context-independent library; CUkernel handles by name.

        CUkernels (what cudart uses) launch into any context's streams, green
        contexts included, unlike module-scoped CUfunctions.
        """
        lib = ctypes.c_void_p()
        self._check(
            "cuLibraryLoadData",
            self._lib.cuLibraryLoadData(ctypes.byref(lib), image, None, None, 0, None, None, 0),
        )
        out = {}
        for name in names:
            kernel = ctypes.c_void_p()
            self._check("cuLibraryGetKernel", self._lib.cuLibraryGetKernel(ctypes.byref(kernel), lib, name.encode()))
            out[name] = kernel.value
        return out

    def create_stream(self, priority: int) -> int:
        """A non-blocking stream of `priority` (lower is higher; the device range, not torch's)."""
        stream = ctypes.c_void_p()
        self._check(
            "cuStreamCreateWithPriority",
            self._lib.cuStreamCreateWithPriority(ctypes.byref(stream), STREAM_NON_BLOCKING, priority),
        )
        return stream.value

    def launch(
        self, kernel: int, grid: int, block: int, shared_mem: int, stream: int, args: list, cluster: int = 1
    ) -> None:
        """cuLaunchKernelEx of a 1-D grid; `args` are ctypes values in the kernel's parameter order."""
        params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        attr = _LaunchAttribute(id=LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
        attr.value[0], attr.value[1], attr.value[2] = cluster, 1, 1
        config = _LaunchConfig(
            grid=(ctypes.c_uint * 3)(grid, 1, 1), block=(ctypes.c_uint * 3)(block, 1, 1), shared_mem=shared_mem,
            stream=ctypes.c_void_p(stream), attrs=ctypes.pointer(attr) if cluster > 1 else None,
            num_attrs=1 if cluster > 1 else 0,
        )
        self._check(
            "cuLaunchKernelEx",
            self._lib.cuLaunchKernelEx(ctypes.byref(config), ctypes.c_void_p(kernel), params, None),
        )

    def alloc(self, nbytes: int) -> int:
        """cuMemAlloc: a device pointer to `nbytes` (the _v2 entry points take 64-bit pointers)."""
        ptr = ctypes.c_uint64()
        self._check("cuMemAlloc", self._lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
        return ptr.value

    def free(self, ptr: int) -> None:
        self._check("cuMemFree", self._lib.cuMemFree_v2(ctypes.c_uint64(ptr)))

    def zero(self, ptr: int, nbytes: int) -> None:
        self._check("cuMemsetD8", self._lib.cuMemsetD8_v2(ctypes.c_uint64(ptr), ctypes.c_ubyte(0),
                                                          ctypes.c_size_t(nbytes)))

    def copy_to_host(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self._check("cuMemcpyDtoH", self._lib.cuMemcpyDtoH_v2(buf, ctypes.c_uint64(ptr), ctypes.c_size_t(nbytes)))
        return buf.raw

    def host_alloc(self, nbytes: int) -> tuple[int, int]:
        """Pinned host memory the GPU reads in place: (host pointer, its device pointer)."""
        host, dev = ctypes.c_void_p(), ctypes.c_uint64()
        self._check("cuMemHostAlloc", self._lib.cuMemHostAlloc(
            ctypes.byref(host), ctypes.c_size_t(nbytes), MEMHOSTALLOC_PORTABLE | MEMHOSTALLOC_DEVICEMAP))
        ctypes.memset(host, 0, nbytes)
        self._check("cuMemHostGetDevicePointer",
                    self._lib.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), host, ctypes.c_uint(0)))
        return host.value, dev.value

    def synchronize(self) -> None:
        """cuCtxSynchronize: wait for all work of the current context."""
        self._check("cuCtxSynchronize", self._lib.cuCtxSynchronize())

    def max_active_blocks(self, handle: int, threads: int, dynamic_smem: int) -> int:
        return self._int(
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            ctypes.c_void_p(handle),
            threads,
            ctypes.c_size_t(dynamic_smem),
        )


@cache
def driver() -> Driver | None:
    """The process's driver, or None where there is no libcuda or no usable GPU."""
    import ctypes.util  # on use: 7 ms of `ccoverlap analyze`'s start, which never needs it

    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        drv = Driver(ctypes.CDLL(name))
        return drv if drv.device_count() > 0 else None
    except (OSError, CudaError):
        return None
