"""The float-sensitive tests, rerun under every CPU kernel choice this machine offers.

A test that compares floats exactly across batch shapes passes on the CPU it was written on and
fails on the next one (MKL and ATen pick their kernels by CPU: AVX2 or AVX-512). CI runs on
machines whose CPUs differ, so the suite itself reruns the tests that compare model outputs under
each choice the machine can make — ``MKL_ENABLE_INSTRUCTIONS`` (MKL's matrix multiplies) and
``ATEN_CPU_CAPABILITY`` (PyTorch's own vectorised kernels) — and a kernel difference is found here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
# The tests whose assertions touch model outputs computed in more than one way (batch shapes,
# chunks, KV cache vs full forward): each states whether it is exact by construction or which
# tolerance it takes, and why.
FLOAT_SENSITIVE = ["tests/test_grpo.py", "tests/test_generation.py"]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def kernel_choices() -> list[tuple[str, str]]:
    """(variable, value) pairs this CPU can honour: AVX-512 only where the CPU has it."""
    flags = _cpu_flags()
    avx512 = "avx512f" in flags
    choices = [("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("ATEN_CPU_CAPABILITY", "default")]
    if "avx2" in flags:
        choices.append(("ATEN_CPU_CAPABILITY", "avx2"))
    if avx512:
        choices += [("MKL_ENABLE_INSTRUCTIONS", "AVX512"), ("ATEN_CPU_CAPABILITY", "avx512")]
    return choices


def test_choices_follow_the_cpu():
    choices = kernel_choices()
    assert ("ATEN_CPU_CAPABILITY", "default") in choices
    has_512 = "avx512f" in _cpu_flags()
    assert (("MKL_ENABLE_INSTRUCTIONS", "AVX512") in choices) == has_512


@pytest.mark.slow
@pytest.mark.parametrize("variable,value", kernel_choices(), ids=lambda v: str(v))
def test_float_sensitive_tests_pass_under_kernel_choice(variable, value, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")}
    env[variable] = value
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"),
         *FLOAT_SENSITIVE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"{variable}={value}:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    if variable == "ATEN_CPU_CAPABILITY":  # the variable took effect: torch reports the capability asked for
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert probe.stdout.strip().lower() == value.lower(), probe.stdout + probe.stderr
