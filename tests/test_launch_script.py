"""The launch-script reader of `rlexp import` (rlexp.training.launch_script): bash evaluated statically,
never run. Reference values are what bash itself prints for the same text (checked with
`bash -c 'printf "%s\\n" ...'` where bash is on the machine) — the expectations are written out here
so the test holds without it; `test_agrees_with_bash` compares them with the real bash when present."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rlexp.cli import main
from rlexp.training.launch_script import (
    MAX_SCRIPT_BYTES,
    ScriptError,
    Unknown,
    launch_of,
    read_env_file,
    read_script,
    unknown_arguments,
)

OPENRLHF = "python3 -m openrlhf.cli.train_ppo_ray"

# (script lines before the launch, the arguments after it, what bash passes)
CASES = [
    ("export A=1 # a comment\n", "--a $A", ["--a", "1"]),
    ("", "--x ${UNSET:-dflt} --y ${UNSET-d2}", ["--x", "dflt", "--y", "d2"]),
    ("E=\n", "--x ${E:-colon} ${E-nocolon}", ["--x", "colon"]),
    ("S=set\n", "--x ${S:+alt} ${S%%t*} ${S#s}", ["--x", "alt", "se", "et"]),
    ("N=3\n", "--n $((1024 * 2)) --m $(((N + 1) * 2)) --d $((7 / -2)) --p $((2 ** 70))",
     ["--n", "2048", "--m", "8", "--d", "-3", "--p", "0"]),
    ("ARR=(--a 1 \"b c\")\nARR+=(--z)\n", '"${ARR[@]}" ${#ARR[@]} ${ARR[0]}', ["--a", "1", "b c", "--z", "4", "--a"]),
    ("EXTRA='--k 1   --j 2'\n", "$EXTRA \"$EXTRA\"", ["--k", "1", "--j", "2", "--k 1   --j 2"]),
    ("", '--x 1 $@ "$@" $*', ["--x", "1"]),
    ("Q='it''s'\n", "--q \"a\\\"b\" '$Q' $'t\\x'", ["--q", 'a"b', "$Q", "t\\x"]),
    ("M=/m\n", "--p ${M}/x\"$M\"'$M'", ["--p", "/m/x/m$M"]),
    ("A=\"x=1 \\\n y=2\"\nC=z\n", '"$C $A  $((1+1))" $C', ["z x=1  y=2  2", "z"]),
    ("B=fsdp\nif [[ $B == megatron ]]; then N=1; elif [ \"$B\" = fsdp ] && [ 2 -gt 1 ]; then N=2; else N=3; fi\n",
     "--n $N", ["--n", "2"]),
    # defaults the grammar splits into a name and a word (`1e` + `-6`), and `$((…))` it reads as `$(` + `(…)`
    ("", "--lr ${LR:-1e-6} --m ${M:-zai-org/GLM-4.1V} --p ${P:-$((1024 * 2))}",
     ["--lr", "1e-6", "--m", "zai-org/GLM-4.1V", "--p", "2048"]),
    # `$((…))` whose expression opens with `(` inside a default: the grammar reads `$(` + an ERROR there
    # (rlexp reads that word again on its own); the variable unset, set, empty; quoted, in a word, two of them
    ("N=3\n", "--t ${T:-$(((N + 1) * 2))} \"${T:-$(((N + 1) * 2))}\" --u ${U:-p$(( (N + 1) * 2 ))q} "
     "${U:-$(((N + 1) * 2))  $((3))}", ["--t", "8", "8", "--u", "p8q", "8", "3"]),
    ("T=5\nE=\n", "--t ${T:-$(((N + 1) * 2))} ${E-$(((1 + 1) * 2))}x ${E:+$(((1 + 1) * 2))} "
     "${Z:=$(((2 + 1) * 2))} $Z \"${E:-$((((1 << 3)) % 5))}\"", ["--t", "5", "x", "6", "6", "3"]),
    # case: the first item whose pattern matches runs (alternatives, globs, quoted text, nested cases)
    ("D=gpu\nM=gb200\ncase \"${D}\" in\n  gpu | npu) ;;\n  *) echo bad; exit 1 ;;\nesac\n"
     "case \"$D\" in\n  npu) N=16 ;;\n  g*)\n    case \"$M\" in\n      gb200) N=4 ;;\n      *) N=8 ;;\n    esac\n"
     "    T=2 ;;\nesac\ncase $M in \"gb\"2??) Q=quoted ;; esac\ncase x in y) Z=1 ;; esac\n",
     "--n $N --t $T --q $Q --z ${Z:-none}", ["--n", "4", "--t", "2", "--q", "quoted", "--z", "none"]),
]


@pytest.mark.parametrize(("before", "args", "expected"), CASES)
def test_expansions_as_bash_expands_them(before, args, expected):
    script = read_script(f"{before}{OPENRLHF} \\\n  {args}\n")
    assert launch_of(script.argv).args == expected


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here to compare with")
@pytest.mark.parametrize(("before", "args", "expected"), CASES)
def test_agrees_with_bash(before, args, expected):
    """The expectations above are bash's own (the comparison runs bash on text this test wrote)."""
    out = subprocess.run(["bash", "-c", f"{before}printf '%s\\n' {args}"], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == expected


def test_env_prefix_comments_continuations_and_a_commented_out_last_flag():
    text = ('#!/bin/bash\nset -x\nCUDA_VISIBLE_DEVICES="" \\\n  VLLM_X=1 python3 -m openrlhf.cli.train_ppo_ray \\\n'
            "   --pretrain m \\\n   # --comment_inside \\\n   --seed 2 \\\n   # --use_wandb KEY \\\n\n")
    # bash: the comment line ends the command (its trailing \\ is inside the comment)
    script = read_script(text)
    assert launch_of(script.argv).args == ["--pretrain", "m"]
    assert script.env == {"CUDA_VISIBLE_DEVICES": "", "VLLM_X": "1"} and script.line == 3


def test_wrappers_run_the_rest_of_their_words():
    script = read_script("nohup env -u X A=1 python3 -m verl.trainer.main_ppo a.b=1 > log 2>&1 &\n")
    assert launch_of(script.argv).args == ["a.b=1"] and script.env == {"A": "1"}
    assert launch_of(read_script("exec time python3 -m verl.trainer.main_ppo a.b=2\n").argv).args == ["a.b=2"]


def test_here_string_and_bash_c_hold_the_command():
    for text in ('M=verl.trainer.main_ppo\nbash <<< "python3 -m $M a.b=1"\n',
                 "M=verl.trainer.main_ppo\nbash -c \"python3 -m $M a.b=1\"\n"):
        script = read_script(text)
        assert launch_of(script.argv).args == ["a.b=1"] and script.line == 2


def test_unknowns_are_values_not_errors_and_say_what_they_are():
    text = ("D=$(date +%s)\nfor i in 1 2; do K=$i; done\n"
            f"{OPENRLHF} --save_path /ckpt/$D --seed $K --pretrain $HOME/m --x `hostname`\n")
    args = launch_of(read_script(text).argv).args
    save, seed, pretrain, x = args[1], args[3], args[5], args[7]
    assert isinstance(save, Unknown) and "command substitution" in save.what and save.known == "/ckpt/"
    assert isinstance(seed, Unknown) and "inside a for loop at line 2" in seed.what
    assert isinstance(pretrain, Unknown) and "--env HOME=VALUE" in pretrain.what and pretrain.line == 3
    assert isinstance(x, Unknown) and "command substitution" in x.what
    clean, unknowns = unknown_arguments(args, "flags")
    assert [u.key for u in unknowns] == ["save_path", "seed", "pretrain", "x"]
    # arithmetic is not command substitution; an array is not a second command
    arith = read_script(f"N=$((UNSET_MISSING + 2))\nA=(1 2)\n{OPENRLHF} --n $N --m $(($(nproc) * 2))\n")
    args = launch_of(arith.argv).args
    assert args[1] == "2" and isinstance(args[3], Unknown) and "command substitution" in args[3].what


def test_a_case_is_read_only_where_bash_s_choice_is_known():
    # the word only running tells (verl's examples detect the device by running python)
    text = ("DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' 2>/dev/null && echo npu || echo gpu)}\n"
            "case \"$DEVICE\" in\n  gpu) TP=2 ;;\n  npu) TP=4 ;;\nesac\n"
            "python3 -m verl.trainer.main_ppo r.tp=$TP\n")
    tp = launch_of(read_script(text).argv).args[0]
    assert isinstance(tp, Unknown) and "inside a case statement at line 2" in tp.what
    assert launch_of(read_script(text, {"DEVICE": "npu"}).argv).args == ["r.tp=4"]
    # an item that falls through (;&) or an extended glob is not read: what the case assigns stays unknown
    for case in ("case a in a) TP=1 ;& b) TP=2 ;; esac\n", "case a in @(a|b)) TP=1 ;; esac\n"):
        tp = launch_of(read_script(f"{case}python3 -m verl.trainer.main_ppo r.tp=$TP\n").argv).args[0]
        assert isinstance(tp, Unknown) and "case statement" in tp.what


ROUTER_REPLAY = Path(__file__).resolve().parent / "data" / "launch_scripts" / "verl" / \
    "router_replay__run_qwen3_30b_a3b_megatron.sh"


@pytest.mark.parametrize("env", [{}, {"MAX_PROMPT_LENGTH": "1000", "MAX_RESPONSE_LENGTH": "3096"},
                                 {"PPO_MAX_TOKEN_LEN_PER_GPU": "777"}, {"MAX_PROMPT_LENGTH": "7"}])
def test_a_default_holding_arithmetic_reads_as_bash_expands_it(env):
    """verl's router-replay example (line 68): ``${x:-$(((a + b) * 2))}``, which tree-sitter's grammar
    cannot read in place; rlexp's value of it is what bash gives for the script's lines up to there."""
    text = ROUTER_REPLAY.read_text()
    env = {"HOME": "/root", **env}  # the script runs under `set -u` and reads $HOME (facts.json gives it)
    script = read_script(text, env)
    values = {k: script.variables[k] for k in ("max_prompt_length", "max_response_length",
                                               "ppo_max_token_len_per_gpu")}
    if len(env) == 1:  # the script's own defaults, 512 + 512, without running bash
        assert values["ppo_max_token_len_per_gpu"] == "2048"
    args = launch_of(script.argv).args
    assert f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={values['ppo_max_token_len_per_gpu']}" in args
    if shutil.which("bash") is None:
        return
    # bash itself on the script's lines 1-69 (assignments, `if`s on them, `set`, `export`: nothing else
    # runs), in an environment of only `env`
    head = "".join(text.splitlines(keepends=True)[:69])
    assert not re.search(r"\$\((?!\()|`|^\s*(python|ray|bash|source)\b", head, flags=re.M)
    out = subprocess.run(["bash", "-c", head + 'printf "%s\\n" "$max_prompt_length" "$max_response_length" '
                          '"$ppo_max_token_len_per_gpu"'], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", **env}).stdout
    assert out.splitlines() == list(values.values())


def test_arithmetic_in_a_default_is_unknown_where_an_operand_is_and_odd_shapes_still_refused():
    launch = "python3 -m verl.trainer.main_ppo"
    for before, what in (("", "command substitution"), ("for i in 1; do N=$i; done\n", "for loop")):
        value = launch_of(read_script(f"{before}{launch} a.b=${{T:-$((($(nproc) + N) * 2))}}\n"
                                      if not before else f"{before}{launch} a.b=${{T:-$(((N + 1) * 2))}}\n").argv).args[0]
        assert isinstance(value, Unknown) and what in value.what and value.known == "a.b=", value
    # set, the default is not expanded: nothing unknown
    assert launch_of(read_script(f"T=4\n{launch} a.b=${{T:-$((($(nproc) + 1) * 2))}}\n").argv).args == ["a.b=4"]
    # `;`, `#`, a newline in that word: bash takes them as text, the grammar reads them otherwise: refused,
    # naming the line (an error in another part of a script is not hidden by the re-reading either)
    for word in ("$(((1 + 1) * 2));x", "$(((1 + 1) * 2)) #c", "$(((1 + 1) *\n 2))x\ny"):
        with pytest.raises(ScriptError) as err:
            read_script(f"A=1\n{launch} a.b=${{T:-{word}}}\n")
        assert err.value.line == 2 and "grammar" in err.value.message, (word, err.value)
    with pytest.raises(ScriptError) as err:
        read_script(f"X=${{T:-$(((1 + 1) * 2))}}\nY=<bad>\n{launch} a.b=$X\n")
    assert err.value.line == 2


def test_env_given_fills_and_env_file_is_data():
    script = read_script(f"{OPENRLHF} --pretrain $HOME/m\n", {"HOME": "/root"})
    assert launch_of(script.argv).args == ["--pretrain", "/root/m"]
    assert read_env_file("# c\nexport A=1\nB='x y' # c\nC=\n") == {"A": "1", "B": "x y", "C": ""}
    with pytest.raises(ValueError, match="line 1"):
        read_env_file("A=$(rm -rf /) B\n")
    assert read_env_file("A='$(touch /tmp/never)'\n") == {"A": "$(touch /tmp/never)"}  # read, never run


def test_nothing_is_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    text = (f"touch {marker}\nX=$(touch {marker})\nsource {marker}\neval 'touch {marker}'\n"
            f"{OPENRLHF} --pretrain `touch {marker}`\n")

    def refuse(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    read_script(text)
    assert not marker.exists()


# --- hostile sizes (each a fast one-line refusal, exit 2: bounds by size, not by time) -----------

def _import(tmp_path, capsys, text: str | bytes):
    script = tmp_path / "hostile.sh"
    script.write_bytes(text if isinstance(text, bytes) else text.encode())
    start = time.perf_counter()
    rc = main(["import", str(script), str(tmp_path / "a"), "--version", "0.9.3"])
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    return rc, err, elapsed


@pytest.mark.parametrize("name", ["10MB-argument", "variable-10x-10MB", "expansion-bomb", "array-bomb",
                                  "200k-continuations", "deep-arithmetic", "deep-subshells", "deep-defaults"])
def test_hostile_sizes_refused_fast_in_one_line(tmp_path, capsys, name):
    big = "x" * (10 << 20)
    text = {
        "10MB-argument": f"{OPENRLHF} --pretrain {big}\n",
        "variable-10x-10MB": f"V={big}\n{OPENRLHF} " + " ".join(["--pretrain $V"] * 10) + "\n",
        "expansion-bomb": "A=xxxxxxxxxxxxxxxx\n" + "".join("A=$A$A$A$A\n" for _ in range(40)) + f"{OPENRLHF} --pretrain $A\n",
        "array-bomb": "A=(x x x x x x x x)\n" + "".join('A=("${A[@]}" "${A[@]}")\n' for _ in range(40))
                      + f'{OPENRLHF} "${{A[@]}}"\n',
        "200k-continuations": f"{OPENRLHF} " + "\\\n" * 200_000 + "--pretrain m\n",
        "deep-arithmetic": f"{OPENRLHF} --n $((" + "(" * 5000 + "1" + ")" * 5000 + "))\n",
        "deep-subshells": "( " * 3000 + f"{OPENRLHF} --pretrain m" + " )" * 3000 + "\n",
        "deep-defaults": f"{OPENRLHF} --pretrain " + "${A:-" * 3000 + "m" + "}" * 3000 + "\n",
    }[name]
    rc, err, elapsed = _import(tmp_path, capsys, text)
    assert elapsed < 10, elapsed
    if name == "200k-continuations":  # 400 kB of continuations is a legal script: read, then refused by
        assert rc == 2 and "--prompt_data" in err  # what it lacks, in one line
    else:
        assert rc == 2 and len(err.strip().splitlines()) == 1 and err.startswith("rlexp: "), err[:300]
        assert any(w in err for w in ("bytes", "characters", "nested", "elements")), err[:300]
    assert not (tmp_path / "a").exists()


def test_script_size_bound_is_stated():
    with pytest.raises(ScriptError, match=str(MAX_SCRIPT_BYTES)):
        read_script("#" * (MAX_SCRIPT_BYTES + 1))


def test_mutated_corpus_scripts_are_read_or_refused_in_one_line(tmp_path, capsys):
    """Real scripts with shell metacharacters inserted and deleted at random (a fixed seed): every
    one is imported or refused in one line, never a traceback."""
    import random
    from pathlib import Path

    corpus = Path(__file__).resolve().parent / "data" / "launch_scripts"
    scripts = sorted(corpus.glob("verl/*.sh")) + sorted(corpus.glob("trl/*.sh"))
    pieces = list("$(){}[]\"'\\`#=;&|<> \n-@*!:+%/,") + ["${", "$((", "))", "+", "=[a,b]", "={a: 1}", "\\\n", "fi"]
    rng = random.Random(11)
    for i in range(150):
        source = rng.choice(scripts)
        chars = list(source.read_text())
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(chars))
            if rng.random() < 0.4:
                del chars[at]
            else:
                chars.insert(at, rng.choice(pieces))
        script = tmp_path / f"m{i}.sh"
        script.write_text("".join(chars))
        version = "0.9.1" if source.parent.name == "verl" else "1.16.0"
        rc = main(["import", str(script), str(tmp_path / f"a{i}"), "--version", version, "--pool-size", "1000",
                   "--monitor-size", "100", "--env", "HOME=/r"])
        _, err = capsys.readouterr()
        assert rc in (0, 2), err
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("rlexp: "), err
            assert not (tmp_path / f"a{i}").exists()


RESEARCH = Path(__file__).resolve().parent / "data" / "launch_scripts" / "research"


def _bash_argv(path: Path, cwd: Path) -> list[str]:
    """What bash passes to `python3` when it runs the script, `python3` and `tee` replaced by shell
    functions (the two files below, reviewed, set variables and run only those two), in ``cwd``
    (a temporary folder: nothing is written beside the committed files)."""
    out = subprocess.run(["bash", "-c", 'python3() { printf "%s\\n" "$@"; }; tee() { cat; }; source "$0"', str(path)],
                         capture_output=True, text=True, check=True, cwd=cwd).stdout
    return out.splitlines()


@pytest.mark.parametrize(("name", "last"), [
    # `trainer.total_epochs=15 \` then commented-out flags: the comment ends the command; what
    # follows, `max_turns=10 \` + `2>&1 | tee log`, is a pipeline of an assignment (the grammar misreads it)
    ("Travel-R1__train_grpo.sh", "trainer.total_epochs=15"),
    # `max_turns=10\` + `    2>&1 | tee log`: the 2 is the redirect's descriptor, not an argument
    ("word_guess_R1__train_grpo.sh", "max_turns=10"),
])
def test_pipelines_the_grammar_misreads_are_read_as_bash_runs_them(name, last, tmp_path):
    script = read_script((RESEARCH / name).read_text())
    args = launch_of(script.argv).args
    assert args[-1] == last and "2" not in args
    if shutil.which("bash") is not None:  # bash's own reading of the same file
        assert ["-m", "verl.trainer.main_ppo", *args] == _bash_argv(RESEARCH / name, tmp_path)


def test_the_script_folder_idiom_is_the_folder_import_was_given():
    """`SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"` (a real research script): bash prints
    the folder the script is in; import knows it, so data paths built on it are known."""
    text = (RESEARCH / "RLVR-vs-SFT-Qwen2.5-1.5b__train_grpo.sh").read_text()
    args = launch_of(read_script(text, script_dir="/exp/scripts").argv).args
    assert "data.train_files=/exp/scripts/data/train.parquet" in args
    assert "data.val_files=/exp/scripts/data/gsm8k_test.parquet" in args
    unknown = [a for a in launch_of(read_script(text).argv).args if isinstance(a, Unknown)]  # folder not given
    assert unknown and "command substitution" in unknown[0].what and unknown[0].line == 5
    # another command substitution stays unknown even with the folder given
    other = read_script('D="$(cd /tmp && pwd)"\npython3 -m verl.trainer.main_ppo data.train_files=$D/t\n',
                        script_dir="/exp")
    assert isinstance(launch_of(other.argv).args[0], Unknown)
