"""What a communication kernel is: one table (csrc/policy.c, ccov_comm_kernels) in one dialect (POSIX extended),
for the interposer and the doctor's analysis alike; a user's regex is checked by that same regcomp before any
work, in run, doctor, tune and analyze. CPU only: the interposer runs on the fake CUDA driver."""
from __future__ import annotations

import subprocess
import sys

import pytest
from test_interposer import launch

from ccoverlap.cli import main
from ccoverlap.analysis.model import Classifier, KernelClass
from ccoverlap.model.comm import BUILTIN, CommKernels
from ccoverlap.util.errors import UsageError

#: names as the driver reports them (mangled) and as Kineto writes them (demangled) -> communication?
NAMES = {
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL": True,
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": True,
    "_Z24ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE": True,  # mangled: not at the start
    "ncclKernel_AllReduce_RING_LL_Sum_float": True,
    "ncclSymkDevKernel_AllReduce_LL": True,
    "ncclDevKernel_rccl_AllReduce": True,
    "rcclGenericKernel": True,
    "NCCL_Custom": True,  # any case
    "comm_paced": True,  # the bench's emulated collective
    "comm_proxy": True,  # the lab's
    "comm_proxy_v2": False,  # ccoverlap's names exactly
    "sm90_xmma_gemm_bf16bf16_bf16f32": False,
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>": False,
    "Memcpy DtoD (Device -> Device)": False,
}


def test_the_one_table_classifies_every_name():
    assert BUILTIN == "nccl|rccl|^comm_(proxy|paced)$"
    comm, classifier = CommKernels(), Classifier()
    assert {n: comm(n) for n in NAMES} == NAMES
    assert {n: classifier.classify(n, "kernel") == KernelClass.COMMUNICATION for n in NAMES} == NAMES


def test_a_users_regex_is_posix_extended_for_every_tool(fake):
    """`[[:upper:]]` is POSIX (Python's re reads it as a set of characters); `\\d` is no POSIX digit (GNU reads a
    'd'). The analysis answers as the interposer does: the same regcomp."""
    posix = CommKernels("compute[[:upper:]]_func")
    assert posix("computeA_func") and not posix("computea_func")
    assert CommKernels("gemm\\d")("gemmd") and not CommKernels("gemm\\d")("gemm1")
    rows, _ = launch(fake, "auto", CCOVERLAP_PAD_BYTES=512, CCOVERLAP_COMM="compute[[:upper:]]_func")
    pads = {r["kernel"]: r["shared"] - r["requested"] for r in rows}
    assert pads["computeA_func"] == 0 and pads["computeK_cudart_kernel"] == 512  # communication: never padded
    classify = Classifier.with_user_regex("compute[[:upper:]]_func").classify
    assert {k: classify(k, "kernel") == KernelClass.COMMUNICATION for k in pads} == {k: p == 0 for k, p in pads.items()}


@pytest.mark.parametrize("regex", ["(", "a{1", "[z-a]"])
def test_a_bad_regex_is_one_line_and_nothing_runs(regex, tmp_path, capsys):
    marker = tmp_path / "ran"
    cmd = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    for argv in (["run", "--comm", regex, *cmd],
                 ["doctor", "--out", str(tmp_path / "d"), "--comm-regex", regex, *cmd],
                 ["tune", "--out", str(tmp_path / "t"), "--comm-regex", regex, *cmd],
                 ["analyze", str(tmp_path), "--comm-regex", regex]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("not a valid POSIX extended regex" in err
                                         or "is not a POSIX extended regex" in err)
        assert regex in err
    assert not marker.exists() and not (tmp_path / "d").exists() and not (tmp_path / "t").exists()
    with pytest.raises(UsageError, match="is not a POSIX extended regex"):
        Classifier.with_user_regex(regex)


def test_a_policy_file_with_a_bad_comm_regex_is_refused(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "ccoverlap-policy/1", "comm_regex": "("}')
    out = subprocess.run([sys.executable, "-m", "ccoverlap", "run", "--config", str(path), "--", "true"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.strip().startswith(f"ccoverlap run: error: {path}: comm_regex '(' is not")
