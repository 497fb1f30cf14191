"""Adapters at the edge: MLflow, provenance, metric ingestion, the tiny model, rendering."""
