"""The one-page report of an attempt, rendered: the verdict first, then the deliverables a reviewer
needs, with plots.

:func:`rlexp.stages.report.gather` reads the attempt's files into a :class:`ReportInputs`; these
modules turn it into ``reports/<experiment>/<attempt>.md`` (:mod:`.markdown`, numbers written by
:mod:`.formatters`), the PNGs beside it (:mod:`.plots`) and one self-contained HTML page for
MLflow (:mod:`.html`). :mod:`.parent` compares the attempt with its parent, for the report,
``rlexp decide`` and MLflow.
"""

from rlexp.reporting.html import report_html
from rlexp.reporting.inputs import ReportInputs
from rlexp.reporting.markdown import DELIVERABLES, next_step, render_markdown
from rlexp.reporting.parent import compare_with_parent
from rlexp.reporting.plots import render_plots

__all__ = ["DELIVERABLES", "ReportInputs", "compare_with_parent", "next_step", "render_markdown", "render_plots",
           "report_html"]
