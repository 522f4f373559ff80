"""The guide pages the docs site makes of README.md's sections (`scripts/docs_pages.py`)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "docs_pages.py"


def _pages_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_pages", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_pages", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_every_in_page_link_of_a_guide_names_a_heading_of_that_page() -> None:
    """A README link to another section (`[…](#operating-it-metrics-logs-traces)`) leads to
    that section's page on the site, not to an anchor missing from the page it is on."""
    pages_module = _pages_module()
    pages, _ = pages_module.generate()
    for page in pages:
        headings = {pages_module._anchor(h.strip()) for h in re.findall(r"^#{1,6} (.+)$", page.markdown, re.M)}
        for anchor in re.findall(r"\]\(#([^)\s]+)\)", page.markdown):
            assert anchor in headings, (page.path, anchor)
    glance = next(p for p in pages if p.path == "guides/the-api-at-a-glance.md")
    assert "[Operating it](../guides/operating-it-metrics-logs-traces.md)" in glance.markdown
