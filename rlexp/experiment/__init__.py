"""The experiment directory: its layout, strict file readers and writers, records, ledger and provenance."""
