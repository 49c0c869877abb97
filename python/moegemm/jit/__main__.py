"""`python -m moegemm.jit --warmup ...`; see warmup.py."""

import sys

from .warmup import main

sys.exit(main())
