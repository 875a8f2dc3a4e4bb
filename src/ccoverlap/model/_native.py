"""ctypes binding to the C core (csrc/occupancy.c, csrc/policy.c, csrc/jsonscan.c), built by the package's build.

The launch interposer compiles the same C files, so Python and C can never
disagree about what fits on an SM, nor about what a policy means.
"""
from __future__ import annotations

import ctypes
import importlib.util
from functools import cache

from ccoverlap.model.limits import DeviceLimits


class CDevice(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "warp_size", "max_threads_per_block", "max_threads_per_sm", "max_blocks_per_sm",
        "regs_per_sm", "regs_per_block", "reg_alloc_unit", "max_regs_per_thread",
        "reg_subpartitions", "smem_per_sm", "smem_per_block_optin",
        "smem_reserved_per_block", "smem_alloc_unit", "sm_count",
    )]

    @classmethod
    def of(cls, limits: DeviceLimits) -> CDevice:
        return cls(*(getattr(limits, name) for name, _ in cls._fields_))


class CKernel(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("threads", "regs", "static_smem", "dynamic_smem")]

    @classmethod
    def of(cls, footprint) -> CKernel:
        return cls(footprint.threads, footprint.regs, footprint.static_smem, footprint.dynamic_smem)


class COccupancy(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "blocks", "limit_warps", "limit_registers", "limit_shared_memory", "limit_blocks",
        "limiting", "smem_per_block", "regs_per_warp",
    )]


class CPlan(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in (
        "feasible", "pad_bytes", "compute_blocks", "compute_blocks_before", "binding", "comm_alone_fits",
        "drain", "multiwave_grid",
    )]


class CPolicyField(ctypes.Structure):
    """policy.h: ccov_field, one row of the interposer's policy table."""

    _fields_ = [
        ("key", ctypes.c_char_p), ("env", ctypes.c_char_p), ("option", ctypes.c_char_p),
        ("metavar", ctypes.c_char_p), ("kind", ctypes.c_int), ("lo", ctypes.c_int), ("hi", ctypes.c_int),
        ("choices", ctypes.POINTER(ctypes.c_char_p)), ("default", ctypes.c_char_p),
        ("sets_mode", ctypes.c_char_p), ("help", ctypes.c_char_p),
    ]


class CJsonScan(ctypes.Structure):
    """jsonscan.h: ccov_json_scan, how deeply a JSON text read so far nests."""

    _fields_ = [(n, ctypes.c_int) for n in ("depth", "deepest", "in_string", "escaped")]


#: policy.h: CCOV_KIND_*, in order
POLICY_KINDS = ("enum", "int", "int_auto", "regex", "path")


def library_path() -> str:
    spec = importlib.util.find_spec("ccoverlap._occupancy")
    if spec is None or not spec.origin:
        raise ImportError("ccoverlap's C core is not built: reinstall with `pip install -e .`")
    return spec.origin


@cache
def lib() -> ctypes.CDLL:
    so = ctypes.CDLL(library_path())
    P = ctypes.POINTER
    so.ccov_occupancy_compute.argtypes = [P(CDevice), P(CKernel), P(COccupancy)]
    so.ccov_coresident.argtypes = [P(CDevice), P(CKernel), ctypes.c_int, P(CKernel), ctypes.c_int, P(ctypes.c_int)]
    so.ccov_pad_for_blocks.argtypes = [P(CDevice), P(CKernel), ctypes.c_int]
    so.ccov_plan_pad_drain.argtypes = [P(CDevice), P(CKernel), P(CKernel), ctypes.c_int, ctypes.c_int, P(CPlan)]
    so.ccov_plan_auto.argtypes = [P(CDevice), P(CKernel), P(CKernel), ctypes.c_int, ctypes.c_longlong, P(CPlan)]
    so.ccov_policy_parse.argtypes = [P(ctypes.c_char_p), P(ctypes.c_char), ctypes.c_size_t]
    so.ccov_policy_field.argtypes = [ctypes.c_int]
    so.ccov_policy_field.restype = P(CPolicyField)
    so.ccov_comm_new.argtypes = [ctypes.c_char_p, P(ctypes.c_char), ctypes.c_size_t]
    so.ccov_comm_new.restype = ctypes.c_void_p
    so.ccov_comm_is.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    so.ccov_comm_free.argtypes = [ctypes.c_void_p]
    so.ccov_json_scan_feed.argtypes = [P(CJsonScan), ctypes.c_char_p, ctypes.c_size_t]
    return so
