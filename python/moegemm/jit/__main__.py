"""`python -m moegemm.jit --warmup ...`, the command line users know. The warmup itself lives
in moegemm.warmup.cli: it sits above the API (it enumerates the heuristics' picks), so this
entry point is the one jit module that imports it."""

import os
import signal
import sys
from types import FrameType


def _stopped_while_importing(signum: int, frame: FrameType | None) -> None:
    # Nothing is built yet and nothing needs stopping: one line and the shell's status, not
    # the traceback of whichever import the signal landed in. os._exit: a KeyboardInterrupt
    # raised here could surface anywhere in the half-imported modules.
    word = "interrupted" if signum == signal.SIGINT else "terminated"
    os.write(2, f"python -m moegemm.jit: {word}\n".encode())
    os._exit(128 + signum)


# Until main() installs its own handlers (which stop the builds first). `import moegemm`, which
# runs before this file, defers its API under `-m` (moegemm/__init__.py), so torch loads after.
signal.signal(signal.SIGINT, _stopped_while_importing)
signal.signal(signal.SIGTERM, _stopped_while_importing)

from moegemm.warmup.cli import main  # after the handlers: these imports take a while

sys.exit(main())
