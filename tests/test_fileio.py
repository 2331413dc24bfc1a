"""Writes leave nothing behind: a killed writer's temporary file (or the report's staging folder) is removed by
the next write into the folder, for every writer hwquant has (tests/fileio_writers.py), and a failing write says
which file it could not write (not the temporary one)."""
import errno
import os
import signal
import subprocess
import sys
import threading

import pytest
from fileio_writers import Writers, available

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



def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped): no process has it."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_dead_writers_files_and_staging_folders_are_removed(tmp_path):
    dead = _dead_pid()
    stale_file = tmp_path / f".hwquant-{dead}-model.onnx.k2j3.onnx"
    stale_report = tmp_path / f".hwquant-xquant-{dead}-a8x1"  # xquant/outputs.py's staging folder
    (stale_report / "outlier_histgrams").mkdir(parents=True)
    (stale_report / "report.json").write_text("{}")
    (stale_report / "outlier_histgrams" / "conv.png").write_bytes(b"png")
    stale_file.write_bytes(b"x")
    live_report = tmp_path / f".hwquant-xquant-{os.getppid()}-b9"  # a running process's report: kept
    live_report.mkdir()
    huge = tmp_path / ".hwquant-99999999999999999999-a.json.x.json"  # no process has such a number
    huge.write_bytes(b"x")
    assert sorted(remove_stale_temporaries(tmp_path)) == sorted([stale_file, stale_report, huge])
    assert [p.name for p in tmp_path.iterdir()] == [live_report.name]


# A child process runs one writer and blocks it at its last step, the rename into the target's folder (fileio's,
# or the report's moves out of its staging folder): the test then kills it with SIGKILL, in the middle of the
# write. One process per writer: a blocked writer holds hwquant's locks (concurrency.py), which a second
# writer in the same process would wait for.
_BLOCKED_WRITER = """
import os, sys, threading, traceback
from fileio_writers import Writers

root, name = os.path.abspath(sys.argv[1]), sys.argv[2]
writers = Writers(root)
writers.prepare([name])
real_replace = os.replace

def replace(src, dst, *args, **kwargs):
    if os.path.abspath(os.fspath(dst)).startswith(root + os.sep):
        print("blocked", name, flush=True)
        threading.Event().wait()  # until killed
    return real_replace(src, dst, *args, **kwargs)

os.replace = replace
try:
    writers.write(name)
    print("finished", name, flush=True)
except BaseException:
    traceback.print_exc()
    print("failed", name, flush=True)
"""
_AT_ONCE = 3  # children at a time (each imports the frameworks: memory and the CPUs)


def _kill_in_the_middle_of_writing(root, name) -> int:
    """Start the child writing `name`, wait until it is blocked at the rename, SIGKILL it; returns its pid."""
    child = subprocess.Popen([sys.executable, "-c", _BLOCKED_WRITER, str(root), name], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    watchdog = threading.Timer(240, child.kill)
    watchdog.start()
    try:
        said = None  # what the child says of its writer (other lines: the libraries' own output)
        while said is None and (line := child.stdout.readline()):
            if line.split(" ", 1)[0] in ("blocked", "finished", "failed"):
                said = line.strip()
        assert said == f"blocked {name}", said
    finally:
        watchdog.cancel()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    return child.pid


def test_every_writer_killed_mid_write_leaves_nothing_the_next_write_does_not_remove(tmp_path):
    """For each writer (tests/fileio_writers.py): a process SIGKILLed in the middle of writing the target leaves
    its hidden temporary (file or staging folder) beside it and the old target intact; the next write of the same
    target removes it: nothing named .hwquant-* remains anywhere."""
    from concurrent.futures import ThreadPoolExecutor

    names = available()
    writers = Writers(tmp_path)
    for name in names:  # an older version of each target, which the killed writes must leave as it was
        target = writers.target(name)
        target.parent.mkdir()
        if name == "xquant":
            target.mkdir()
            (target / "report.json").write_text("old")
        else:
            target.write_text("old")
    with ThreadPoolExecutor(_AT_ONCE) as pool:
        pids = dict(zip(names, pool.map(lambda n: _kill_in_the_middle_of_writing(tmp_path, n), names)))
    for name in names:
        target = writers.target(name)
        left = [p.name for p in target.parent.rglob(".hwquant-*")]
        prefix = f".hwquant-xquant-{pids[name]}-" if name == "xquant" else f".hwquant-{pids[name]}-{target.name}."
        assert len(left) == 1 and left[0].startswith(prefix), (name, left)
        assert (target / "report.json" if name == "xquant" else target).read_text() == "old", name
    for name in names:
        writers.write(name)  # the same target again, in this process
        target = writers.target(name)
        assert (target / "report.json" if name == "xquant" else target).read_bytes() != b"old", name
    assert list(tmp_path.rglob(".hwquant-*")) == []
