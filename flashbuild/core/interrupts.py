"""SIGINT, SIGTERM and SIGHUP as one exception on the main thread, so that a build stops in
seconds and its with-blocks clean up on the way out (the compile container removed, which ends
every nvcc; partial objects and staged exports removed).

`handled()` installs the handlers for one task: the first signal raises `Interrupted` (a
KeyboardInterrupt, so no `except Exception` swallows it) wherever the main thread is; its exit
code is 128 + the signal's number (130, 143, 129). A second signal while that cleanup runs
exits at once with the same code, leaving what the cleanup had not reached to the next build
(containers carry labels for that: container.py). `deferred()` holds a signal back over a few
steps that must happen together or not at all (starting a container and keeping its handle,
the export's final renames); it is raised when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum


_state = {"raised": None, "held": None, "depth": 0}


def _handler(signum, frame):
    if _state["raised"] is not None:  # a second signal: the user does not want to wait for cleanup
        os.write(2, b"\nsecond signal: exiting without cleanup; the next build removes what is left\n")
        os._exit(128 + _state["raised"])
    if _state["depth"]:
        _state["held"] = _state["held"] or signum
        return
    _state["raised"] = signum
    raise Interrupted(signum)


@contextlib.contextmanager
def handled():
    """Turn the build's stop signals into `Interrupted` while the block runs (main thread only;
    elsewhere, e.g. a test calling a task's function from a worker thread, a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # A signal ignored from the start stays ignored: `nohup invoke build` must outlive its terminal.
    previous = {signum: signal.signal(signum, _handler) for signum in SIGNALS
                if signal.getsignal(signum) is not signal.SIG_IGN}
    _state.update(raised=None, held=None, depth=0)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred():
    """Hold back a stop signal until the block has finished (it then raises Interrupted)."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        held = _state["held"]
        if held and not _state["depth"]:
            _state["held"] = None
            _state["raised"] = held
            raise Interrupted(held)
