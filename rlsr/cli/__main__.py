"""``python -m rlsr.cli``: the ``rlsr`` command."""

import sys

from rlsr.cli import main

sys.exit(main())
