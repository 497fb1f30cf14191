"""Regenerates the demo's committed reports and every demo figure the README quotes, from one
`rlexp demo` in an empty directory at the current checkout.

    .venv/bin/python scripts/demo_figures.py            # the demo; reports/demo/ and the README block
    .venv/bin/python scripts/demo_figures.py --kernels  # also the demo under other CPU kernel choices

Writes ``reports/demo/*.md|png`` (the one-page reports), ``reports/demo/figures.json`` (decisions,
Δs, timings, the CPU and library versions that produced them) and the README's block between the
``demo-figures`` markers. With ``--kernels`` the demo runs again under each kernel choice this CPU
offers besides its default (``MKL_ENABLE_INSTRUCTIONS=AVX2``, ``ATEN_CPU_CAPABILITY=avx2``; on a CPU
without AVX-512 there is no other choice) and the block says how far decisions and Δs moved.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports" / "demo"
FIGURES = REPORTS / "figures.json"
README = ROOT / "README.md"
START, END = "<!-- demo-figures:start -->", "<!-- demo-figures:end -->"
ATTEMPTS = ("d1", "d1s2", "d2")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    code = ("import json, torch, transformers, peft; print(json.dumps({'torch': torch.__version__, "
            "'transformers': transformers.__version__, 'peft': peft.__version__, "
            "'aten_cpu_capability': torch.backends.cpu.get_cpu_capability()}))")
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def run_demo(directory: Path, env_extra: dict[str, str]) -> dict:
    """One `rlexp demo` in ``directory`` (empty), as a user runs it; its summary (timings included)."""
    env = {**os.environ, **env_extra}
    code = ("import json, sys; from rlexp.stages.demo import demo; "
            "r = demo(sys.argv[1]); open(sys.argv[2], 'w').write(json.dumps(r.to_dict()))")
    summary = directory / "summary.json"
    subprocess.run([sys.executable, "-c", code, str(directory / "run"), str(summary)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())


def figures_of(run_dir: Path) -> dict[str, dict]:
    """Per attempt: the decision, the checkpoint it rests on, and that checkpoint's Δs on the primary set."""
    out = {}
    for attempt in ATTEMPTS:
        d = json.loads((run_dir / "experiments" / "demo" / attempt / "decision.json").read_text())
        checkpoint = d["primary_checkpoint"]
        row = d["checkpoints"][checkpoint]
        vs = row.get("vs") or {}
        primary = d["primary_set"]
        s0 = (vs.get("baseline_s0") or {}).get(primary, {})
        out[attempt] = {
            "decision": d["decision"],
            "baseline": d["baseline"],
            "checkpoint": checkpoint,
            "n": row["n"],
            "acc_base": row["acc_base"], "acc_new": row["acc_new"], "delta_pp": row["delta_pp"],
            "b": row["b"], "c": row["c"], "mcnemar_p": row["mcnemar_p"], "ci_pp": row["ci_pp"],
            "s0_acc": s0.get("acc_base"), "delta_vs_s0_pp": s0.get("delta_pp"),
            "selection_adjusted": d.get("selection_adjusted"),
        }
    return out


def kernel_variants() -> list[dict[str, str]]:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if "avx512f" not in flags:
        return []
    return [{"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, {"ATEN_CPU_CAPABILITY": "avx2"}]


def git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "rlexp", "sop"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return done.stdout.strip() + (" + uncommitted changes" if dirty else "")


def fmt_attempt(name: str, f: dict) -> str:
    base = {"baseline_s0": "S0", "baseline_sota": "SOTA"}.get(f["baseline"], f["baseline"])
    step = f["checkpoint"].replace("global_step", "step ")
    lo, hi = f["ci_pp"]
    adjusted = f.get("selection_adjusted") or {}
    adj = (f"; selection-adjusted {adjusted['adjusted_pp']:+.1f}pp" if adjusted.get("adjusted_pp") is not None
           else "")
    s0 = (f" · S0 {f['s0_acc']:.1%} → {f['acc_new']:.1%} ({f['delta_vs_s0_pp']:+.1f}pp)"
          if f["baseline"] != "baseline_s0" and f.get("s0_acc") is not None else "")
    return (f"| {name} | **{f['decision']}** | {step} | vs {base}: {f['acc_base']:.1%} → {f['acc_new']:.1%}, "
            f"Δ {f['delta_pp']:+.1f}pp (b/c {f['b']}/{f['c']}, p {f['mcnemar_p']:.2g}, CI [{lo:+.1f}, {hi:+.1f}]){adj}{s0} |")


def block(data: dict) -> str:
    t = data["timings_s"]
    split = ", ".join(f"{k} {v} s" for k, v in t.items() if k != "total" and v >= 1.0)
    lines = [
        START,
        f"Measured at commit `{data['commit']}` on {data['cpu']} ({os.cpu_count()} cores; torch {data['versions']['torch']}, "
        f"ATen capability {data['versions']['aten_cpu_capability']}, transformers {data['versions']['transformers']}), "
        f"by `scripts/demo_figures.py`: `rlexp demo` in an empty directory took **{t['total']:.0f} s** "
        f"({split}; the steps under 1 s are left out).",
        "",
        "| attempt | decision | checkpoint decided on | primary set (OOD-1000), paired |",
        "|---|---|---|---|",
        *(fmt_attempt(name, f) for name, f in data["attempts"].items()),
    ]
    if data.get("kernels"):
        lines += ["", "The same demo under other CPU kernel choices of this machine (what another CPU would change):", ""]
        for variant in data["kernels"]:
            label = " ".join(f"{k}={v}" for k, v in variant["env"].items())
            moves = []
            for name, f in variant["attempts"].items():
                ref = data["attempts"][name]
                same = "same decision" if f["decision"] == ref["decision"] else f"**{f['decision']}** (was {ref['decision']})"
                moves.append(f"{name} {same}, Δ {f['delta_pp']:+.1f}pp ({f['delta_pp'] - ref['delta_pp']:+.1f})")
            lines.append(f"- `{label}`: " + "; ".join(moves) + ".")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", action="store_true", help="also run the demo under other kernel choices")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        main_dir = Path(tmp) / "default"
        main_dir.mkdir()
        summary = run_demo(main_dir, {})
        data = {"commit": git_commit(), "cpu": cpu_name(), "versions": versions(),
                "timings_s": summary["timings_s"], "attempts": figures_of(main_dir / "run"), "kernels": []}
        REPORTS.mkdir(parents=True, exist_ok=True)
        for old in REPORTS.glob("*"):
            if old.suffix in (".md", ".png"):
                old.unlink()
        for new in (main_dir / "run" / "reports" / "demo").iterdir():
            shutil.copy2(new, REPORTS / new.name)
        if args.kernels:
            for i, env in enumerate(kernel_variants()):
                variant_dir = Path(tmp) / f"variant{i}"
                variant_dir.mkdir()
                run_demo(variant_dir, env)
                data["kernels"].append({"env": env, "attempts": figures_of(variant_dir / "run")})
    FIGURES.write_text(json.dumps(data, indent=2) + "\n")
    text = README.read_text()
    if START in text and END in text:
        text = text[: text.index(START)] + block(data) + text[text.index(END) + len(END):]
        README.write_text(text)
    print(block(data))


if __name__ == "__main__":
    main()
