"""``python -m statekeeper.cli``: the ``statekeeper`` command."""

import sys

from statekeeper.cli import main

sys.exit(main())
