"""`hwquant` run in a pseudo-terminal: its output as a person sees it (stdout and stderr together)."""
import os
import sys


def on_terminal(args, cwd, env=None, columns=None):
    """(exit code, everything the command printed) of `python -m hwquant *args` run in `cwd` on a pseudo-terminal
    (`columns` wide where given; `env`: the child's environment, this process's when None)."""
    import pty
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command on the terminal's side
        os.chdir(cwd)
        argv = [sys.executable, "-m", "hwquant", *map(str, args)]
        os.execve(sys.executable, argv, os.environ if env is None else env)
    if columns:
        import fcntl
        import struct
        import termios
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, columns, 0, 0))
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")
