"""The report as one self-contained HTML page, for viewers that show markdown as text."""

from __future__ import annotations

from pathlib import Path


def report_html(markdown_path: Path) -> str:
    """The report as one self-contained HTML page (plots inlined as data URIs), for viewers that
    show markdown as text, such as MLflow's artifact pane."""
    import base64
    import re

    from markdown_it import MarkdownIt

    text = Path(markdown_path).read_text(encoding="utf-8")

    def inline(match: re.Match) -> str:
        png = Path(markdown_path).parent / match.group(2)
        if not (png.suffix == ".png" and png.is_file()):
            return match.group(0)
        data = base64.b64encode(png.read_bytes()).decode()
        return f"![{match.group(1)}](data:image/png;base64,{data})"

    text = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", inline, text)
    body = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:1em auto;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}img{max-width:100%}")
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{style}</style></head><body>{body}</body></html>"
