"""The attempt spec (``attempt.yaml``): schema, parent-chain resolution, diff against the parent.

One file per attempt, under ``experiments/<experiment>/<attempt_id>/attempt.yaml``. A child names
its parent (``parent: a29b``), inherits everything and overrides what it states; ``change`` declares
the one training variable it changes, and :func:`diff_against_parent` says what really changed.

Recipe keys are OpenRLHF v0.9.x argument names without the dashes, so a recipe can be pasted from
a training script; :data:`RECIPE_KEYS` (the table of :mod:`rlexp.spec.recipe`, re-exported here)
holds each key's type, default and kind: *training* (counts against the one-variable rule),
*instrumentation* or *infrastructure*.

Every bad input is an :class:`~rlexp.errors.InputError` naming the file and the key path.

One package, four modules, one public namespace (this one):

- :mod:`~rlexp.spec.model`: the resolved objects (:class:`Attempt`, :class:`EvalSettings`, ...);
- :mod:`~rlexp.spec.schema`: the declarations of every field, checked with the standard
  library, and :func:`attempt_json_schema` that renders them for editors (``docs/attempt.schema.json``);
- :mod:`~rlexp.spec.loader`: :func:`load_attempt` (the parent chain, paths, datasets) and the
  sections other specs share (:func:`validate_spec_section`);
- :mod:`~rlexp.spec.diff`: :func:`diff_against_parent` and what "the same recipe" means.
"""

from rlexp.spec.recipe import (
    INFRASTRUCTURE,
    INSTRUMENTATION,
    LATER_UNDERSCORE_KEYS,
    RECIPE_KEYS,
    TRAINING,
    is_dotted_recipe_key,
)

from .diff import attempt_recipe_sha256, change_value, diff_against_parent, values_equal
from .loader import (
    count_records,
    load_attempt,
    resolve_dataset,
    resolve_eval_settings,
    resolve_spec_path,
    spec_section_rules,
    validate_spec_section,
)
from .model import (
    ANSWER_MODES,
    DATASET_FIELDS,
    ENGINES,
    ENV_ACTIONS,
    ENV_ADVANTAGE_MODES,
    ENV_LOSSES,
    ENV_PRIMARY_METRICS,
    EVAL_ROLES,
    ROLES,
    TRAINER_GRADED_ROLES,
    TRAINERS,
    Attempt,
    Baseline,
    Budget,
    DatasetRef,
    Difference,
    EnvironmentSettings,
    EvalSettings,
    EvalSpec,
    TrainerSettings,
)
from .schema import (
    _ID_RE,  # noqa: F401  (the attempt id's pattern: the ladder names its rungs with it)
    CREDENTIAL_RECIPE_KEYS,
    MAX_SPEC_FLOAT,
    MAX_SPEC_INT,
    SCHEMA_DRAFT,
    attempt_json_schema,
    attempt_json_schema_text,
    change_keys,
    is_credential_key,
    validate_recipe,
)

__all__ = [
    "ANSWER_MODES", "CREDENTIAL_RECIPE_KEYS", "DATASET_FIELDS", "ENGINES", "ENV_ACTIONS", "ENV_ADVANTAGE_MODES", "ENV_LOSSES",
    "ENV_PRIMARY_METRICS", "EVAL_ROLES", "INFRASTRUCTURE", "INSTRUMENTATION", "LATER_UNDERSCORE_KEYS",
    "MAX_SPEC_FLOAT", "MAX_SPEC_INT", "RECIPE_KEYS", "ROLES", "SCHEMA_DRAFT", "TRAINERS", "TRAINER_GRADED_ROLES",
    "TRAINING", "Attempt", "Baseline", "Budget", "DatasetRef", "Difference", "EnvironmentSettings", "EvalSettings", "EvalSpec",
    "TrainerSettings", "attempt_json_schema", "attempt_json_schema_text", "attempt_recipe_sha256", "change_keys",
    "change_value", "count_records", "diff_against_parent", "is_credential_key", "is_dotted_recipe_key",
    "load_attempt", "resolve_dataset", "resolve_eval_settings", "resolve_spec_path", "spec_section_rules",
    "validate_recipe", "validate_spec_section", "values_equal",
]
