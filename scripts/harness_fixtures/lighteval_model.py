"""The scripted model as a lighteval custom model (``lighteval custom NAME lighteval_model.py ...``).

The model name carries its seed and skill: ``scripted-<seed>-<skill>``. No tokenizer is needed:
the custom backend hands whole documents to these methods.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scripted_model  # noqa: E402
from lighteval.models.abstract_model import LightevalModel  # noqa: E402
from lighteval.models.model_output import ModelResponse  # noqa: E402
from lighteval.utils.cache_management import SampleCache  # noqa: E402


class ScriptedLightevalModel(LightevalModel):
    def __init__(self, config) -> None:
        self.config = config
        _, seed, skill = config.model_name.split("-")
        self.seed, self.skill = int(seed), float(skill)
        self._cache = SampleCache(config)  # the pipeline reads and clears every model's sample cache

    @property
    def tokenizer(self):
        return None

    @property
    def add_special_tokens(self) -> bool:
        return False

    @property
    def max_length(self) -> int:
        return 2048

    def greedy_until(self, docs):
        return [ModelResponse(text=[scripted_model.answer(d.query, self.seed, self.skill).split("\n")[0].strip()])
                for d in docs]

    def loglikelihood(self, docs):
        return [ModelResponse(logprobs=[scripted_model.loglikelihood(d.query, c, self.seed, self.skill)
                                        for c in d.choices],
                              argmax_logits_eq_gold=[False for _ in d.choices]) for d in docs]

    def loglikelihood_rolling(self, docs):
        raise NotImplementedError
