"""``python -m runtime serve ...``."""

import sys

from runtime.cli import main

sys.exit(main())
