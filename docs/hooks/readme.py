"""mkdocs hook: a page holding ``<!-- readme: <heading> -->`` gets that README section, so the
site's guides and the README say one thing. Links the README makes into docs/ are made
relative to the site's pages."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_MARK = re.compile(r"<!-- readme: (.+?) -->")


def _section(readme: str, heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", readme, flags=re.M | re.S)
    if match is None:
        raise ValueError(f"README.md has no section '## {heading}'")
    # the page's title is its own: the section's subsections move up one level
    body = re.sub(r"^###", "##", match.group(1), flags=re.M)
    return body.replace("](docs/", "](")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- readme:" not in markdown:
        return markdown
    readme = (Path(config["docs_dir"]).parent / "README.md").read_text(encoding="utf-8")
    return _MARK.sub(lambda m: _section(readme, m.group(1)), markdown)
