"""Writes leave nothing behind: a killed writer's temporary file is removed by the next write into the
folder, and a failing write says which file it could not write (not the temporary one)."""
import errno
import os
import signal
import subprocess
import sys

import pytest

import hwquant as mct
from hwquant.errors import FileWriteError
from hwquant.fileio import atomic_write, remove_stale_temporaries

_KILLED_WRITER = """
import sys, time
from hwquant.fileio import write_through_temporary

def write(tmp):
    with open(tmp, "wb") as f:
        f.write(b"x" * 100000)
        f.flush()
    print("writing", flush=True)
    time.sleep(60)  # killed here, before the rename

write_through_temporary(sys.argv[1], write)
"""


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "model.onnx"
    target.write_bytes(b"old")
    writer = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(target)], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert writer.stdout.readline().strip() == b"writing"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
    left = [p for p in tmp_path.iterdir() if p != target]
    assert len(left) == 1 and left[0].name.startswith(f".hwquant-{writer.pid}-model.onnx.")
    assert target.read_bytes() == b"old"  # the target intact
    atomic_write(tmp_path / "other.json", "{}")  # any write into the folder cleans up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "other.json"]


def test_temporaries_of_live_writers_are_kept(tmp_path):
    mine = tmp_path / f".hwquant-{os.getpid()}-a.onnx.x1.onnx"  # another thread of this process writing
    parent = tmp_path / f".hwquant-{os.getppid()}-b.onnx.x2.onnx"  # a running process writing
    other = tmp_path / ".someone-else.tmp"  # not hwquant's naming
    for p in (mine, parent, other):
        p.write_bytes(b"x")
    assert remove_stale_temporaries(tmp_path) == []
    assert all(p.exists() for p in (mine, parent, other))


def test_tpc_export_that_cannot_write_names_the_target(tmp_path, monkeypatch):
    def refuse(src, dst):
        raise OSError(errno.EROFS, "Read-only file system", str(src))

    monkeypatch.setattr("hwquant.fileio.os.replace", refuse)
    path = tmp_path / "tpc.json"
    with pytest.raises(FileWriteError, match=r"cannot write '.*tpc\.json': Read-only file system; choose a writable folder") as e:
        mct.target_platform_capabilities.export_target_platform_capabilities(mct.get_target_platform_capabilities(), path)
    assert isinstance(e.value, OSError) and e.value.errno == errno.EROFS and e.value.filename == str(path)
    assert list(tmp_path.iterdir()) == []

