"""`python -m a2rl_cli`: how a2rl starts its own processes (`a2rl.launch`)."""

import sys

from a2rl_cli import main

sys.exit(main())
