"""The one-page sweep report (markdown), verdict first: the selected model and its reason on top,
then the ranking table, stage 2, the truncation check and what was held fixed.

Rendered from ``result/ranking.json`` alone (a pure function of that document), so the report
can be regenerated from the file and says nothing the file does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlexp.spec.sweep import band_text, format_params


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def render_sweep_report(ranking: Mapping[str, Any]) -> str:
    criteria = ranking["criteria"]
    band = (criteria["band"][0], criteria["band"][1])
    selection = ranking["selection"]
    stage1 = ranking["stage1_set"]
    lines = [f"# Sweep {ranking['sweep']} ({ranking['experiment']})", ""]
    if selection["candidate"]:
        lines.append(f"**Selected: {selection['candidate']}** — {selection['reason']}")
    else:
        lines.append(f"**No model selected** — {selection['reason']}")
    truncation = ranking.get("truncation_check")
    if truncation and truncation.get("verdict"):
        lines += ["", f"**Truncation check ({truncation['candidate']}):** {truncation['verdict']}"]
    if ranking.get("description"):
        lines += ["", ranking["description"]]

    limit = f", first {ranking['stage1_limit']} problems" if ranking.get("stage1_limit") else ""
    lines += ["", f"## Stage 1: every candidate on {stage1}{limit}", "",
              f"Headroom band {band_text(band)}; ranked by accuracy. Rates are shares of the problems: "
              "boxed / last-number are how the answer was extracted, fail is no parsable answer, "
              "trunc is `finish_reason == length`.", "",
              "| rank | candidate | acc (correct/n) | in band | boxed | last number | fail | trunc | size | stage 2 |",
              "|---:|---|---:|:---:|---:|---:|---:|---:|---:|---|"]
    for row in ranking["candidates"]:
        s = row["primary"]
        band_flag = "yes" if row["in_band"] else f"no ({row['band_distance_pp']:.1f} pp)"
        stage2 = "selected" if row["selected"] else ("dropped" if row["dropped"] else
                                                     ("finalist" if row["finalist"] else "–"))
        name = f"**{row['name']}**" if row["selected"] else row["name"]
        lines.append(f"| {row['rank']} | {name} | {_pct(s['acc'])} ({s['correct']}/{s['n']}) | {band_flag} | "
                     f"{_pct(s['boxed_rate'])} | {_pct(s['last_number_rate'])} | {_pct(s['fail_rate'])} | "
                     f"{_pct(s['truncation_rate'])} | {format_params(row['params'])} | {stage2} |")

    sets = ranking["stage2_sets"]
    finalists = [row for row in ranking["candidates"] if row["finalist"]]
    if sets and finalists:
        lines += ["", f"## Stage 2: {len(finalists)} finalist{'s' if len(finalists) != 1 else ''} on {', '.join(sets)}", "",
                  "| candidate | " + " | ".join(f"{s} acc (correct/n) | {s} fail" for s in sets) + " | note |",
                  "|---|" + "---:|---:|" * len(sets) + "---|"]
        for row in finalists:
            cells = []
            for role in sets:
                st = row["stage2"].get(role)
                cells += ([f"{_pct(st['acc'])} ({st['correct']}/{st['n']})", _pct(st["fail_rate"])] if st
                          else ["–", "–"])
            lines.append(f"| {row['name']} | " + " | ".join(cells) + f" | {row['dropped'] or ''} |")

    if truncation:
        lines += ["", "## Truncation check", ""]
        if truncation.get("skipped"):
            lines.append(f"Skipped: {truncation['skipped']}.")
        else:
            cmp = truncation["comparison"]
            short, long = truncation["max_tokens"]
            lines += [f"{truncation['candidate']} on the first {truncation['subset']} problems of "
                      f"{truncation['set']}, the same problems under both budgets (paired).", "",
                      "| max_tokens | acc (correct/n) | truncated (finish_reason) | boxed | fail |",
                      "|---:|---:|---:|---:|---:|"]
            for tokens in (short, long):
                arm = truncation["arms"][str(tokens)]
                lines.append(f"| {tokens} | {_pct(arm['acc'])} ({arm['correct']}/{arm['n']}) | "
                             f"{_pct(arm['truncation_rate'])} | {_pct(arm['boxed_rate'])} | {_pct(arm['fail_rate'])} |")
            lines += ["", f"Δ (max_tokens {long} − {short}) {cmp['delta_pp']:+.1f} pp; b = {cmp['b']} problems only "
                      f"max_tokens {short} gets right, c = {cmp['c']} only max_tokens {long} does; McNemar exact "
                      f"p = {cmp['mcnemar_p']:.3g}; paired bootstrap {100 * cmp['confidence']:g}% CI "
                      f"[{cmp['ci_pp'][0]:+.1f}, {cmp['ci_pp'][1]:+.1f}] pp ({cmp['resamples']} resamples, "
                      f"seed {cmp['seed']})."]

    ev = ranking["eval"]
    lines += ["", "## Held fixed", "",
              f"- engine {ev['engine']}, decoding {ev['decoding']['mode']} (temperature "
              f"{ev['decoding']['temperature']:g}, n {ev['decoding']['n']}), max_tokens {ev['max_tokens']}, "
              f"prompt suffix {ev['prompt_suffix']!r}",
              "- criteria: band " + band_text(band) + f", format tolerance {criteria['format_tolerance_pp']:g} pp"
              + (f", sanity accuracy ≥ {_pct(criteria['min_sanity_acc'])}" if criteria.get("min_sanity_acc") is not None
                 else ""),
              f"- finalists: {', '.join(ranking['finalists']) or 'none'}",
              "- datasets: " + "; ".join(f"{role} n={d['size']} sha256 {d['sha256'][:12]}"
                                         for role, d in ranking["datasets"].items()),
              f"- spec sha256 {ranking['spec_sha256'][:12]}"]
    return "\n".join(lines) + "\n"
