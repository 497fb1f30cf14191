"""``python -m rlexp.backends.local_trainer ATTEMPT_DIR [--resume]``: the entry of the local trainer.

The trainer is :mod:`rlexp.trainers.local.train` (its configuration and loss beside it in
``rlexp/trainers/local/``). This module stays, and stays this thin, because its name is recorded in
every local launch's ``launch/argv.json``: an experiment directory launched before the move resumes
with the argv it recorded.
"""

from __future__ import annotations

import sys

from rlexp.trainers.local.train import main

if __name__ == "__main__":
    sys.exit(main())
