"""Moved: the report is gathered by :mod:`rlexp.stages.report` and rendered by :mod:`rlexp.reporting`
(markdown, plots, HTML); this path stays for old imports of the renderers."""

from rlexp.reporting import (
    DELIVERABLES,
    ReportInputs,
    compare_with_parent,
    next_step,
    render_markdown,
    render_plots,
    report_html,
)

__all__ = ["DELIVERABLES", "ReportInputs", "compare_with_parent", "next_step", "render_markdown", "render_plots",
           "report_html"]
