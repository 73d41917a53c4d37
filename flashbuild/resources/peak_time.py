"""GNU time's `time -f FORMAT -o FILE COMMAND...`, for hosts that lack it.

The host-toolchain backend (host_toolchain.py) runs every compile through this script, so that
a GPU machine without GNU time still records each TU's wall time and peak memory. FORMAT's %e
is the wall time in seconds and %M the peak resident set in KiB of the command and of every
descendant it waited for (nvcc's cicc, ptxas and gcc), read from wait4's rusage as GNU time
reads it. Like GNU time it ignores SIGINT and SIGQUIT while the command runs (the command gets
them), writes "Command exited with non-zero status N" or "Command terminated by signal N" first
when so, and exits with the command's status (128 + N for signal N).

Run by path, standalone: it imports nothing of flashbuild.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def render(fmt: str, wall_s: float, peak_kb: int) -> str:
    """FORMAT with %e, %M and %% replaced (the directives the build uses)."""
    out, i = [], 0
    while i < len(fmt):
        pair = fmt[i:i + 2]
        if pair == "%e":
            out.append(f"{wall_s:.2f}")
        elif pair == "%M":
            out.append(str(peak_kb))
        elif pair == "%%":
            out.append("%")
        else:
            out.append(fmt[i])
            i += 1
            continue
        i += 2
    return "".join(out)


def parse(argv: list[str]) -> tuple[str, str | None, list[str]]:
    """(format, output file or None, command) from `-f FORMAT -o FILE COMMAND...`."""
    fmt, output = "%e %M", None
    while argv and argv[0] in ("-f", "-o"):
        if len(argv) < 2:
            raise SystemExit(f"peak_time: {argv[0]} needs a value")
        if argv[0] == "-f":
            fmt = argv[1]
        else:
            output = argv[1]
        argv = argv[2:]
    if not argv:
        raise SystemExit("usage: peak_time.py [-f FORMAT] [-o FILE] COMMAND [ARG...]")
    return fmt, output, argv


def main(argv: list[str]) -> int:
    fmt, output, command = parse(argv)
    started = time.monotonic()
    try:
        pid = os.posix_spawnp(command[0], command, os.environ,
                              setsigdef=(signal.SIGINT, signal.SIGQUIT))
    except OSError as exc:
        print(f"peak_time: cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    lines = []
    if os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)
        lines.append(f"Command terminated by signal {os.WTERMSIG(status)}")
    else:
        code = os.WEXITSTATUS(status)
        if code:
            lines.append(f"Command exited with non-zero status {code}")
    lines.append(render(fmt, wall, usage.ru_maxrss))  # ru_maxrss is in KiB on Linux
    text = "\n".join(lines) + "\n"
    if output:
        with open(output, "w") as out:
            out.write(text)
    else:
        sys.stderr.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
