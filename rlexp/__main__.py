"""``python -m rlexp``: the console script (``rlexp``) for an environment without it on PATH."""

import sys

from rlexp.console import main

if __name__ == "__main__":
    sys.exit(main())
