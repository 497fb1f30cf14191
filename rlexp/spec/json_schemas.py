"""The JSON Schema of every file a user writes (``attempt.yaml``, the ladder and sweep specs, a SOP),
each derived from the field declarations its loader checks with (:mod:`rlexp.spec.fields`), so the
loader, its error line and the schema cannot drift apart. Editors complete and check keys with
them; the repository commits them as ``docs/<name>.schema.json`` (``scripts/write-schemas`` writes
them, a test fails while one is stale). Built on demand: nothing here is imported by ``rlexp plan``."""

from __future__ import annotations

from typing import Any

from rlexp.spec.fields import schema_text

__all__ = ["json_schemas", "schema_text"]


def json_schemas() -> dict[str, dict[str, Any]]:
    """``{file type: its JSON Schema}``: attempt, ladder, sweep, sop."""
    from rlexp.spec import attempt_json_schema
    from rlexp.spec.ladder import ladder_json_schema
    from rlexp.spec.sop import sop_json_schema
    from rlexp.spec.sweep import sweep_json_schema

    return {"attempt": attempt_json_schema(), "ladder": ladder_json_schema(), "sweep": sweep_json_schema(),
            "sop": sop_json_schema()}
