"""``python -m sweworld`` is the ``sweworld`` command."""

import sys

from sweworld.cli import main

sys.exit(main())
