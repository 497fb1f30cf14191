"""The experiment directory on disk: its one layout owner, strict readers and atomic writers."""
