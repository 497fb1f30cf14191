"""verl's fully-async trainer (rlexp.trainers.verl.fully_async): its key table against Hydra's composition
of the wheel's config, and every figure plan prints against verl's own code.

The reference is the code of the pinned wheels: the rollouter's, the message queue's and the trainer's
methods that count (``FullyAsyncRollouter.__init__``'s total-rollout lines, ``set_max_required_samples``,
``_create_continuous_iterator``, ``_feed_samples``; ``MessageQueue.put_sample`` / ``get_sample``;
``FullyAsyncTrainer.fit``, ``fit_step``, ``_fit_generate``, ``_get_samples_from_queue``,
``_fit_update_local_step``, ``_fit_validate``, ``_fit_save_checkpoint``, ``_fit_postprocess_step`` and the
separation trainer's ``_fit_update_actor``), their source read from the wheel and run unchanged in a
child process, with Ray, the models and the logging replaced by stand-ins that record what verl asks of
them (an actor update, a validation, a checkpoint). The rollout hands each fed prompt to the queue
once the queue has room (the rollouter's pause rule: it does not generate while the queue holds
``max_queue_size``). The LR is megatron-core's OptimizerParamScheduler built by verl's own
``get_megatron_optimizer_param_scheduler`` (tests/test_verl_megatron_lr.py's child) from the optimizer
config as the workers receive it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import zipfile

import pytest
from test_import_corpus import FACTS
from test_verl_backend import pinned_wheel
from test_verl_megatron_lr import run_megatron

from rlexp.trainers.verl import fully_async, fully_async_config, releases
from rlexp.trainers.verl.fully_async import schedule_of, steps_of
from rlexp.trainers.verl.steps import VerlConfigError, lr_for_global_step

VERSIONS = ("0.9.0", "0.9.1")
PKG = "verl/experimental/fully_async_policy"
OPT = "actor_rollout_ref.actor.optim"
CORPUS_SCRIPT = "verl/mtp_trainer__run_mimo_7b_mtp_fully_async_megatron_multinode.sh"


def fa_config(version: str = "0.9.0", **stated):
    """The fully-async Megatron config (rlexp's table) with ``stated`` over it (``__`` = ``.``)."""
    resolved = {name: key.default for name, key in fully_async_config.table(version, "megatron").items()}
    resolved.update({"model_engine": "megatron", fully_async.ENTRY_KEY: fully_async.MODULE,
                     "data.train_batch_size": 0, f"{OPT}.lr_warmup_steps": 10, f"{OPT}.lr_decay_steps": 5000})
    for name, value in stated.items():
        name = name.replace("__", ".")
        assert name in resolved, name
        resolved[name] = value
    return resolved


@pytest.mark.parametrize("version", VERSIONS)
def test_the_key_table_is_what_hydra_composes(version):
    """rlexp's table for the fully-async config (the Megatron engine's, with the generated delta over it)
    is every key and default Hydra composes from that release's fully_async_ppo_megatron_trainer.yaml."""
    composed = releases.flatten(fully_async_config.composed_config(pinned_wheel(version), "megatron"))
    assert {k.name: (k.type, k.default) for k in composed} == \
        {k.name: (k.type, k.default) for k in fully_async_config.table(version, "megatron").values()}
    assert composed and any(k.name == "async_training.trigger_parameter_sync_step" for k in composed)


def _method_source(tree: ast.Module, cls: str, names: tuple[str, ...]) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            found = {n.name: ast.unparse(n) for n in node.body
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name in names}
            assert set(found) == set(names), set(names) - set(found)
            return [found[n] for n in names]
    raise AssertionError(cls)


def _init_lines(tree: ast.Module) -> str:
    """The rollouter ``__init__``'s statements that set ``self.total_rollout_steps``."""
    init = next(n for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "FullyAsyncRollouter"
                for n in c.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    picked = [s for s in init.body if "total_rollout_steps" in ast.unparse(s) and not isinstance(s, ast.Expr)]
    assert len(picked) == 2, [ast.unparse(s) for s in picked]  # the assignment and its `if`
    return "\n".join(ast.unparse(s) for s in picked)


def verls_own_sources(version: str) -> dict:
    with zipfile.ZipFile(pinned_wheel(version)) as archive:
        def tree(member):
            return ast.parse(archive.read(member).decode())
        rollouter, trainer = tree(f"{PKG}/fully_async_rollouter.py"), tree(f"{PKG}/fully_async_trainer.py")
        queue, separation = tree(f"{PKG}/message_queue.py"), tree("verl/experimental/separation/ray_trainer.py")
    return {
        "init": _init_lines(rollouter),
        "rollouter": _method_source(rollouter, "FullyAsyncRollouter", (
            "set_max_required_samples", "_create_continuous_iterator", "_feed_samples")),
        "queue": _method_source(queue, "MessageQueue", ("put_sample", "get_sample")),
        "trainer": _method_source(trainer, "FullyAsyncTrainer", (
            "fit", "fit_step", "_fit_generate", "_get_samples_from_queue", "_fit_update_local_step",
            "_fit_validate", "_fit_save_checkpoint", "_fit_postprocess_step")),
        "separation": _method_source(separation, "SeparateRayPPOTrainer", ("_fit_update_actor",)),
    }


_CHILD = r"""
import asyncio, collections, contextlib, json, sys, textwrap, time
from datetime import datetime
request = json.load(sys.stdin)
src = request["sources"]

class Node(dict):  # an OmegaConf node as verl reads it: attributes and .get
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

def nest(flat):
    root = Node()
    for key, value in flat.items():
        node = root
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, Node())
        node[leaf] = value
    return root

class TrainingStopException(Exception):
    pass

class Anything:  # a stand-in that accepts any call or attribute
    def __getattr__(self, name):
        return Anything()
    def __call__(self, *args, **kwargs):
        return Anything()

@contextlib.contextmanager
def marked_timer(*args, **kwargs):
    yield

class Batch:
    def __init__(self):
        self.meta_info = {}

class Ray:
    class cloudpickle:
        loads = staticmethod(lambda x: x)
        dumps = staticmethod(lambda x: x)
    get = staticmethod(lambda x: x)

class RolloutSample:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

glob = {"asyncio": asyncio, "time": time, "datetime": datetime, "ray": Ray, "marked_timer": marked_timer,
        "TrainingStopException": TrainingStopException, "RolloutSample": RolloutSample,
        "prepare_single_generation_data": lambda batch_dict, config: batch_dict,
        "assemble_batch_from_rollout_samples": lambda samples, *a: Batch(),
        "should_save_ckpt_esi": lambda **kw: False, "print": lambda *a, **k: None, "deque": collections.deque,
        "logger": Anything(), "reduce_metrics": lambda metrics: {}}

def cls_of(name, sources, **extra):
    namespace = dict(glob)
    exec("from __future__ import annotations\nclass " + name + ":\n" + textwrap.indent("\n\n".join(sources), "    "), namespace)
    klass = namespace[name]
    for key, value in extra.items():
        setattr(klass, key, value)
    return klass

Queue = cls_of("MessageQueue", src["queue"])
Rollouter = cls_of("FullyAsyncRollouter", src["rollouter"])

async def identity(self, batch=None, *a, **k):
    return batch

def nothing(self, *a, **k):
    return None

class Recorder:
    pass

def run(case):
    config = nest(case["config"])
    out = {"updates": [], "validations": [], "saves": [], "steps": 0}
    # the rollouter's counts
    ro = Rollouter()
    ro.config, ro.train_dataloader = config, list(range(case["prompts"]))  # one prompt a batch (gen_batch_size 1)
    exec(src["init"], dict(glob), {"self": ro})
    ro.required_samples = config.actor_rollout_ref.actor.ppo_mini_batch_size * config.async_training.require_batches
    ro.staleness_threshold = config.async_training.get("staleness_threshold", 1)
    ro.concurrent_samples_per_replica, ro._active_count_history = 16, []
    ro.llm_server_manager = Anything()
    ro.llm_server_manager.get_active_server_count = lambda: 1
    async def main():
        ro.lock = asyncio.Lock()
        await ro.set_max_required_samples()
        mq = Queue.__new__(Queue)
        mq.max_queue_size, mq.queue, mq.running = ro.max_queue_size, collections.deque(maxlen=ro.max_queue_size), True
        mq._lock = asyncio.Lock()
        mq._consumer_condition = asyncio.Condition(mq._lock)
        mq.total_produced = mq.total_consumed = mq.dropped_samples = 0
        ro.pending_queue, ro.global_steps = asyncio.Queue(), 1

        async def rollout():  # each fed prompt, generated, into the queue when it has room (the pause rule)
            while True:
                sample = await ro.pending_queue.get()
                while sample is not None and len(mq.queue) >= mq.max_queue_size:
                    await asyncio.sleep(0)
                await mq.put_sample(sample)
                if sample is None:
                    return

        class Client:
            async def get_sample(self):
                return await mq.get_sample()
            def get_queue_size_sync(self):
                return len(mq.queue)

        class Validator:
            class do_validate:
                @staticmethod
                async def remote():
                    out["validations"].append([tr.global_steps, tr.current_param_version])
                    return {}

        async def update_weights(self):
            return None

        def update_actor(self, batch):
            out["updates"].append(self.global_steps)
            done = Batch()
            done.meta_info["metrics"] = {}
            return done

        def generated(self, batch, metrics):
            out["steps"] += 1

        def saved(self):
            out["saves"].append([out["steps"], self.current_param_version])

        Trainer = cls_of("FullyAsyncTrainer", src["trainer"] + src["separation"],
                         _fit_compute_reward=identity, _fit_compute_log_prob=lambda s, b: b,
                         _fit_compute_ref_log_prob=lambda s, b: b, _fit_compute_critic=lambda s, b: b,
                         _fit_compute_advantage=lambda s, b: b, _fit_update_critic=lambda s, b: b,
                         _fit_update_weights=update_weights, _fit_dump_data=nothing,
                         _record_train_resource_utilization=nothing, _fit_start_profile=nothing,
                         _fit_stop_profile=nothing, _fit_collect_metrics=nothing,
                         _fit_log_aggregated_training_metrics=nothing, _collect_metrics_from_samples=generated,
                         _update_actor=update_actor, _save_checkpoint=saved, _balance_batch=nothing)
        global tr
        tr = Trainer.__new__(Trainer)
        tr.config, tr.message_queue_client, tr.rollouter = config, Client(), Validator()
        tr.global_steps, tr.local_trigger_step, tr.current_param_version, tr.last_ckpt_version = 0, 1, 0, 0
        tr.trigger_parameter_sync_step = config.async_training.trigger_parameter_sync_step
        tr.required_samples = ro.required_samples
        tr.dynamic_schedule_enabled, tr.dynamic_resource_controller = False, None
        tr._step_wait_times, tr._step_wait_samples, tr.max_steps_duration = [], [], 0
        tr.progress_bar, tr.metrics_aggregator, tr.logger = Anything(), Anything(), Anything()
        tr.metrics, tr.timing_raw, tr.epoch, tr.tokenizer = {}, {}, 0, None
        if config.trainer.get("val_before_train", True):  # fully_async_main, before fit
            await tr._fit_validate(True)
        await asyncio.gather(ro._feed_samples(), rollout(), tr.fit())
        out.update(total_rollout_steps=ro.total_rollout_steps, total_train_steps=ro.total_train_steps,
                   versions=tr.current_param_version, dropped=mq.dropped_samples)
    asyncio.run(main())
    return out

print(json.dumps([run(case) for case in request["cases"]]))
"""


def run_verl(version: str, cases: list[dict]) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps({"sources": verls_own_sources(version),
                                                                            "cases": cases}),
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _case(config: dict, prompts: int) -> dict:
    keep = ("data.", "trainer.", "async_training.", "rollout.", "actor_rollout_ref.actor.ppo_mini_batch_size",
            "actor_rollout_ref.rollout.temperature", "global_profiler.steps")
    return {"prompts": prompts, "config": {k: v for k, v in config.items() if k.startswith(keep)}}


# a stated rollout total below the data, the data below it, require_batches 2, a sync every 3 steps that
# leaves steps after the last version, saves every 2 versions (and the forced last one), the critic's warm-up
VARIANTS = [
    ({}, 1000),
    ({"rollout__total_rollout_steps": None, "trainer__total_epochs": 2}, 250),
    ({"rollout__total_rollout_steps": 700, "async_training__require_batches": 2,
      "actor_rollout_ref__actor__ppo_mini_batch_size": 8, "async_training__trigger_parameter_sync_step": 3,
      "trainer__save_freq": 2, "trainer__test_freq": 3}, 400),
    ({"rollout__total_rollout_steps": 10_000, "trainer__total_epochs": 3, "trainer__critic_warmup": 3,
      "trainer__save_freq": 4, "trainer__test_freq": 2, "trainer__val_before_train": False}, 333),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_steps_validations_and_saves_equal_verls_own_loop(version):
    base = {"actor_rollout_ref__actor__ppo_mini_batch_size": 16, "trainer__total_epochs": 1}
    configs = [(fa_config(version, **{**base, **stated}), prompts) for stated, prompts in VARIANTS]
    answers = run_verl(version, [_case(c, p) for c, p in configs])
    for (config, prompts), verl in zip(configs, answers, strict=True):
        steps = steps_of(config, prompts, version)
        schedule = schedule_of(config, steps)
        own = steps.fully_async["fully_async"]
        assert verl["dropped"] == 0
        assert own["prompts_fed"] == verl["total_rollout_steps"]
        assert own["verl_total_train_steps"] == verl["total_train_steps"]
        assert steps.global_steps_total == verl["steps"] and own["parameter_versions"] == verl["versions"]
        updates = list(range(steps.first_update_step, steps.global_steps_total + 1))
        assert updates == verl["updates"] and steps.actor_updates == len(verl["updates"])
        assert schedule.validation_at_step_0 == ([0, 0] in verl["validations"])
        assert list(schedule.evaluated) == [g for g, _ in verl["validations"] if g > 0]
        assert list(schedule.saved) == [g for g, _ in verl["saves"]]
    assert answers[0]["steps"] == 100 // 16 and answers[2]["saves"]  # the variants reach what they test


def test_the_scheduler_is_built_before_the_trainer_knows_its_steps():
    """fully_async_main builds the trainer (its workers, their optimizers and schedulers) before it hands
    the trainer the rollouter's total_train_steps: the scheduler is built from the config as composed."""
    for version in VERSIONS:
        with zipfile.ZipFile(pinned_wheel(version)) as archive:
            text = archive.read(f"{PKG}/fully_async_main.py").decode()
        init = text.index("def _initialize_components")
        assert text.index("self._create_trainer(config)", init) < text.index("set_total_train_steps", init)
        create = text[text.index("def _create_trainer"):]
        assert "ray.get(trainer.init_workers.remote())" in create[:create.index("\n    def ", 10)]


def _optim(config: dict) -> dict:
    return {k[len(OPT) + 1:]: v for k, v in config.items() if k.startswith(OPT + ".")}


COSINE = fa_config("0.9.0", actor_rollout_ref__actor__ppo_mini_batch_size=16, trainer__total_epochs=1,
                   rollout__total_rollout_steps=None,
                   **{f"{OPT}__lr_decay_style": "cosine", f"{OPT}__min_lr": 1e-7, f"{OPT}__lr_decay_steps": 50})
NO_DECAY_STEPS = fa_config("0.9.0", **{f"{OPT}__lr_decay_steps": None})


@pytest.fixture(scope="module")
def corpus_plan(tmp_path_factory):
    from test_import_corpus import PLANS, _verl_config, import_and_plan

    verb, err, plan, spec = import_and_plan(CORPUS_SCRIPT, tmp_path_factory.mktemp("fully-async"))
    assert verb == PLANS, err
    version = FACTS[CORPUS_SCRIPT]["version"]  # 0.9.0: the script sets actor.megatron.grad_offload
    table = {k: v.default for k, v in fully_async_config.table(version, "megatron").items()}
    return plan, {**_verl_config(CORPUS_SCRIPT, spec), **table, **spec["recipe"]}


@pytest.fixture(scope="module")
def megatron_cores(corpus_plan):
    """megatron-core's LRs as verl 0.9.0's code builds its scheduler (one child process): the cosine
    case over 62 steps, the unstated lr_decay_steps, and the corpus example."""
    plan, config = corpus_plan
    cases = [{**_optim(COSINE), "updates": 62}, {**_optim(NO_DECAY_STEPS), "updates": 1},
             {**_optim(config), "updates": plan["steps"]["global_steps_total"]}]
    return run_megatron(cases, FACTS[CORPUS_SCRIPT]["version"])


def test_the_lr_at_every_step_is_megatron_cores_as_verl_builds_it(megatron_cores):
    steps = steps_of(COSINE, 1000, "0.9.0")  # 62 steps, past the decay's 50
    assert steps.global_steps_total == 62
    answer = megatron_cores[0]
    assert "error" not in answer, answer
    assert answer["decay"] == steps.fully_async["fully_async"]["scheduler_built_with"]["lr_decay_steps"] == 50
    for g in range(1, steps.global_steps_total + 1):
        row = lr_for_global_step(g, steps)
        assert row.lr_first == pytest.approx(answer["applied"][g - 1], rel=1e-12, abs=1e-30), g
        assert row.actor_lr_logged == pytest.approx(answer["logged"][g - 1], rel=1e-12, abs=1e-30), g


def test_without_lr_decay_steps_verl_stops_and_plan_refuses(megatron_cores):
    """optim.total_training_steps stays -1 for the workers: megatron-core's own assert stops verl."""
    assert megatron_cores[1]["error"].startswith("AssertionError")
    with pytest.raises(VerlConfigError, match="state lr_decay_steps") as err:
        steps_of(NO_DECAY_STEPS, 1000, "0.9.0")
    assert err.value.key == f"{OPT}.lr_decay_steps"


def test_settings_whose_counts_depend_on_timing_are_refused():
    for key, value in (("async_training.partial_rollout", False),
                       ("async_training.use_dynamic_resource_scheduling", True)):
        with pytest.raises(VerlConfigError, match="rlexp's limit") as err:
            steps_of({**fa_config(), key: value}, 1000, "0.9.0")
        assert err.value.key == key


def test_only_the_megatron_engine_and_verls_own_batch_settings_plan():
    with pytest.raises(VerlConfigError, match="Megatron engine only"):
        steps_of({**fa_config(), "model_engine": "dp"}, 1000, "0.9.0")
    with pytest.raises(VerlConfigError, match="must be 0") as err:
        steps_of(fa_config(data__train_batch_size=64), 1000, "0.9.0")
    assert err.value.key == "data.train_batch_size"


def test_the_corpus_example_plans_with_verls_own_figures(corpus_plan, megatron_cores):
    """verl's fully-async MTP example (tests/data/launch_scripts), imported as written and planned: its
    steps, versions, validations and saves equal verl's own loop on its config, its LR at every step
    megatron-core's scheduler as verl builds it, and the command runs the fully-async module."""
    plan, config = corpus_plan
    version = FACTS[CORPUS_SCRIPT]["version"]
    assert config[fully_async.ENTRY_KEY] == fully_async.MODULE and config["model_engine"] == "megatron"
    assert plan["verl_command"]["entrypoint"][2:] == [fully_async.MODULE,
                                                      "--config-name=fully_async_ppo_megatron_trainer"]
    (verl,) = run_verl(version, [_case(config, FACTS[CORPUS_SCRIPT]["pool_size"])])
    total = plan["steps"]["global_steps_total"]
    assert total == verl["steps"] == 51_200 // 32  # the script: 51,200 rollouts of 17,398 × 10, 32 a step
    assert plan["steps"]["verl"]["fully_async"]["parameter_versions"] == verl["versions"] == 400
    # what the count assumes is in the plan: a queue drop (a race in verl's pause rule) would shorten the run
    assert "dropped_stale_samples" in plan["steps"]["verl"]["fully_async"]["counts_assume"]
    assert plan["eval_global_steps"] == [g for g, _ in verl["validations"] if g > 0]
    assert plan["save_global_steps"] == [g for g, _ in verl["saves"]] == []  # save_freq -1
    assert plan["validation_at_step_0"] is (verl["validations"][:1] == [[0, 0]]) is False
    answer = megatron_cores[2]
    assert "error" not in answer, answer
    assert plan["steps"]["verl"]["scheduler_total"] == answer["decay"] == 51_200
    rows = plan["lr"]
    assert rows[-1]["global_step"] == total and (len(rows) == total or plan["lr_rows"] != "all")
    for row in rows:
        g = row["global_step"]
        assert row["lr_first"] == pytest.approx(answer["applied"][g - 1], rel=1e-12, abs=1e-30), g
        assert row["actor_lr_logged"] == pytest.approx(answer["logged"][g - 1], rel=1e-12, abs=1e-30), g


def test_a_fully_async_recipe_is_asynchronous_for_run_health():
    from rlexp.trainers.verl import RULES

    assert RULES.async_lag({fully_async.ENTRY_KEY: fully_async.MODULE}) == {"async": True, "mode": "fully_async",
                                                                             "queue": None}
    assert RULES.async_lag({})["async"] is False


def test_launch_refuses_what_only_plan_supports(corpus_plan):
    """A fully-async attempt plans; launch refuses it in one line naming entry_module (its logs count
    parameter versions, which rlexp's reader does not map to trainer steps)."""
    from rlexp.errors import InputError
    from rlexp.spec.loader import load_attempt
    from rlexp.trainers.verl.hydra import prepare_launch

    plan, _ = corpus_plan
    with pytest.raises(InputError, match="does not launch it") as err:
        prepare_launch(load_attempt(plan["spec"]), resume=False, must_exist=False)
    assert "recipe.entry_module" in str(err.value)
