"""The trainer seam's shared parts: step math, launch-script reading, metric logs and the in-run monitor."""
