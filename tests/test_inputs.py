"""util/inputs.py: a regular file opened, anything else refused in one line; a recorded archive extracted for a
with-block and removed after it, a member that would land outside it refused."""
from __future__ import annotations

import io
import os
import tarfile

import pytest

from ccoverlap.util.errors import UsageError
from ccoverlap.util.inputs import extracted, open_regular


def test_a_fifo_is_refused_unopened(tmp_path):
    os.mkfifo(tmp_path / "f")
    with pytest.raises(UsageError, match="^a FIFO, not a trace$"):
        open_regular(tmp_path / "f", "a trace")
    (tmp_path / "r").write_bytes(b"x")
    with open_regular(tmp_path / "r", "a trace") as f:
        assert f.read() == b"x"


def test_an_archive_is_extracted_for_the_block_and_a_folder_taken_as_it_is(tmp_path):
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "rank0_steps.jsonl").write_text("{}\n")
    with tarfile.open(tmp_path / "cap.tgz", "w:gz") as tar:
        tar.add(tmp_path / "cap", arcname="cap")
    with extracted(tmp_path / "cap.tgz") as root:
        assert (root / "cap" / "rank0_steps.jsonl").read_text() == "{}\n"
    assert not root.exists()  # removed with the block
    with extracted(tmp_path / "cap") as root:
        assert root == tmp_path / "cap"
    assert root.exists()  # a folder given is never removed


def test_a_member_outside_the_folder_is_refused(tmp_path):
    with tarfile.open(tmp_path / "bad.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(tarfile.FilterError), extracted(tmp_path / "bad.tgz"):
        pass
    assert not (tmp_path / "escape").exists()
