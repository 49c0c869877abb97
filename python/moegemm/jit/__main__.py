"""`python -m moegemm.jit --warmup ...`, the command line users know. The warmup itself lives
in moegemm.warmup.cli: it sits above the API (it enumerates the heuristics' picks), so this
entry point is the one jit module that imports it."""

import sys

from moegemm.warmup.cli import main

sys.exit(main())
