"""The report's document model: a list of blocks (heading, paragraph, table, image) rendered both to Markdown and
to self-contained HTML, and the number parsing its cells share."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

DASH = "—"  # a missing value


def num(v) -> float | None:
    """``v`` as a finite float, or None when it is not a number or not finite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass
class Heading:
    """A heading block of ``level`` (2 = a section)."""

    text: str
    level: int = 2


@dataclass
class Para:
    """A paragraph block: plain text, optionally followed by a list of links, with its line breaks kept when ``pre``."""

    text: str  # plain text (escaped for HTML)
    links: list[tuple[str, str]] = field(default_factory=list)  # (label, href) appended as a list
    pre: bool = False  # keep line breaks (free-form notes)


@dataclass
class Table:
    """A table block: header cells, rows of (text, bold) cells and an optional caption."""

    header: list[str]
    rows: list[list[tuple[str, bool]]]  # (text, bold)
    caption: str = ""


@dataclass
class Image:
    """An image block: its path relative to the output directory, and its alt text."""

    path: str  # relative to out_dir
    alt: str


def _md_cell(text: str, bold: bool) -> str:
    t = text.replace("|", "\\|")
    return f"**{t}**" if bold and text != DASH else t


def to_markdown(blocks: list) -> str:
    """The blocks as Markdown (table columns after the first right-aligned)."""
    out = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            if b.text:
                out.append(b.text)
            if b.links:
                out.append("\n".join(f"- [{label}]({href})" for label, href in b.links))
        elif isinstance(b, Table):
            lines = [
                "| " + " | ".join(h.replace("|", "\\|") for h in b.header) + " |",
                "|" + "|".join(["---"] + ["---:"] * (len(b.header) - 1)) + "|",
            ]
            lines += ["| " + " | ".join(_md_cell(t, bold) for t, bold in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
            if b.caption:
                out.append(f"*{b.caption}*")
        elif isinstance(b, Image):
            out.append(f"![{b.alt}]({b.path})")
    return "\n\n".join(out) + "\n"


CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .8em 0; }
th, td { border: 1px solid #ccc; padding: .35em .8em; }
th { background: #f4f4f4; }
td:not(:first-child), th:not(:first-child) { text-align: right; }
tr:nth-child(even) td { background: #fafafa; }
caption { caption-side: bottom; font-size: .9em; color: #666; padding-top: .4em; text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
.notes { white-space: pre-wrap; background: #f8f8f8; padding: .8em; border-radius: 4px; }
""".strip()


def to_html(blocks: list, title: str) -> str:
    """The blocks as a self-contained HTML page titled ``title``."""
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>\n{CSS}\n</style>",
        "</head>",
        "<body>",
    ]
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"<h{b.level}>{e(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            if b.text:
                cls = ' class="notes"' if b.pre else ""
                out.append(f"<p{cls}>{e(b.text)}</p>")
            if b.links:
                out.append(
                    "<ul>"
                    + "".join(f'<li><a href="{e(href)}">{e(label)}</a></li>' for label, href in b.links)
                    + "</ul>"
                )
        elif isinstance(b, Table):
            rows = ["<table>"]
            if b.caption:
                rows.append(f"<caption>{e(b.caption)}</caption>")
            rows.append("<thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in b.header) + "</tr></thead>")
            rows.append("<tbody>")
            for row in b.rows:
                cells = []
                for i, (t, bold) in enumerate(row):
                    tag = "th" if i == 0 else "td"
                    txt = f"<strong>{e(t)}</strong>" if bold and t != DASH else e(t)
                    cells.append(f"<{tag}>{txt}</{tag}>")
                rows.append("<tr>" + "".join(cells) + "</tr>")
            rows.append("</tbody></table>")
            out.append("\n".join(rows))
        elif isinstance(b, Image):
            out.append(f'<figure><img src="{e(b.path)}" alt="{e(b.alt)}"></figure>')
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
