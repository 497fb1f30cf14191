"""Run lighteval's own CLI (``lighteval custom ...``) with its task registry limited to the custom task.

Usage: python lighteval_run.py <lighteval CLI arguments>

lighteval imports every built-in task module to build its registry, and one of them downloads a
file at import time, which fails offline; the custom task (lighteval_tasks.py) is all these runs
need, so the built-in modules are not loaded. Everything else is lighteval's real pipeline.
"""

from __future__ import annotations

import sys

from lighteval.tasks.registry import Registry

Registry._load_from_files = staticmethod(lambda files, module_prefix: {})
Registry._load_from_subdirs = staticmethod(lambda subdirs: {})

if __name__ == "__main__":
    from lighteval.__main__ import app

    sys.argv = ["lighteval", *sys.argv[1:]]
    app()
