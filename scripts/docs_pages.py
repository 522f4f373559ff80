"""The reference site's guide pages, generated from README.md so that they never drift.

README.md stays the one source of the guides: its introduction becomes the home page and each
``##`` section a page under ``guides/`` (headings raised one level), in README order;
INTEROP.md and CHANGELOG.md become the ``interop`` and ``changelog`` pages. Relative links
between those files are rewritten to the pages, images are copied in under ``assets/``, and
any other relative link fails the build (the site could not resolve it).

Used two ways:

* as an mkdocs hook (``hooks:`` in mkdocs.yml), so a plain ``mkdocs build`` generates the
  pages in memory: nothing is written into ``docs/site/``. The hook also fills the nav's
  ``Guides`` entry, builds the ``remote`` API page only when the nav lists it (the
  module is being written: list it in mkdocs.yml once its docstrings build cleanly; listing
  it before ``acp_fast/remote/`` is a package is an error). The docstrings are Markdown
  (Google style): nothing rewrites reStructuredText left in them, which
  ``tests/test_docs_site.py`` finds instead;
* ``python scripts/docs_pages.py OUTDIR``: writes the generated pages to OUTDIR, to read them.
"""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: other repository files that become pages: file name -> page
EXTRA_PAGES = {"INTEROP.md": "interop.md", "CHANGELOG.md": "changelog.md"}
#: the API page of a module being written now: built only when the nav lists it
REMOTE_PAGE = "api/remote.md"
REMOTE_PACKAGE = Path("acp_fast") / "remote" / "__init__.py"
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif")

_LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~)")


@dataclass
class Page:
    """One generated page: its path under the docs folder, nav title and Markdown."""

    path: str
    title: str
    markdown: str


def _slug(title: str) -> str:
    title = re.sub(r"\(.*?\)", "", title).replace("`", "")
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """README's introduction and its ``##`` sections as (title, body), code fences respected."""
    intro: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            sections.append((line[3:].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            intro.append(line)
    return "\n".join(intro).strip() + "\n", [(t, "\n".join(b).strip() + "\n") for t, b in sections]


def _raise_headings(markdown: str) -> str:
    """``###`` becomes ``##`` and so on, outside code fences (the section title is the ``#``)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and re.match(r"#{3,6} ", line):
            line = line[1:]
        out.append(line)
    return "\n".join(out) + "\n"


def _anchor(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def _rewrite_links(markdown: str, page: str, source: str, assets: dict[str, Path],
                   sections: dict[str, str] | None = None) -> str:
    """Relative links of ``source`` (a repository file) made to work from ``page``; a link to
    a README section's anchor (``sections``: anchor -> its page) goes to that section's page."""
    depth = page.count("/")
    up = "../" * depth

    def fix(match: re.Match[str]) -> str:
        label, target = match.group(1), match.group(2)
        if target.startswith("#") and sections and target[1:] in sections and sections[target[1:]] != page:
            return f"{label}({up}{sections[target[1:]]})"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return match.group(0)
        path, _, anchor = target.partition("#")
        anchor = "#" + anchor if anchor else ""
        if path in EXTRA_PAGES:
            return f"{label}({up}{EXTRA_PAGES[path]}{anchor})"
        if path == "README.md":
            return f"{label}({up}index.md{anchor})"
        if (REPO / path).is_file() and path.lower().endswith(IMAGE_SUFFIXES):
            name = "assets/" + Path(path).name
            assets[name] = REPO / path
            return f"{label}({up}{name})"
        raise ValueError(f"{source}: the link {target!r} cannot be resolved on the site; "
                         "link a page or an image, or teach scripts/docs_pages.py about it")

    out, fenced = [], False
    for line in markdown.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        out.append(line if fenced else _LINK.sub(fix, line))
    return "\n".join(out) + "\n"


def generate(repo: Path = REPO) -> tuple[list[Page], dict[str, Path]]:
    """The generated pages (home, one per README section, interop, changelog) and the files
    they link to (site path -> repository file)."""
    assets: dict[str, Path] = {}
    intro, sections = _sections((repo / "README.md").read_text(encoding="utf-8"))
    note = ("\n!!! note\n    The guides are the sections of the repository's README.md; "
            "the API reference is generated from the docstrings.\n")
    pages = [Page("index.md", "Home", _rewrite_links(intro + note, "index.md", "README.md", assets))]
    seen: set[str] = set()
    pages_of = {_anchor(title): f"guides/{_slug(title)}.md" for title, _ in sections}
    for title, body in sections:
        path = f"guides/{_slug(title)}.md"
        if path in seen:
            raise ValueError(f"README.md: two sections give the page {path}")
        seen.add(path)
        markdown = _rewrite_links(f"# {title}\n\n{_raise_headings(body)}", path, "README.md", assets, pages_of)
        pages.append(Page(path, title.replace("`", ""), markdown))
    for source, path in EXTRA_PAGES.items():
        text = (repo / source).read_text(encoding="utf-8")
        pages.append(Page(path, path[:-3].capitalize(), _rewrite_links(text, path, source, assets)))
    return pages, assets


# -- the mkdocs hook ----------------------------------------------------------------------

_STATE: dict[str, Any] = {}


def _nav_paths(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_nav_paths(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(*(_nav_paths(v) for v in nav))
    return set()


def on_config(config: Any) -> Any:
    """Fill the nav's ``Guides`` entry; check the ``remote`` page can be built."""
    root = Path(config.config_file_path).resolve().parent
    pages, assets = generate(root)
    _STATE["pages"], _STATE["assets"] = pages, assets
    guides = [{p.title: p.path} for p in pages if p.path.startswith("guides/")]
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Guides" in entry:
            entry["Guides"] = guides
    _STATE["remote"] = REMOTE_PAGE in _nav_paths(config.nav)
    if _STATE["remote"] and not (root / REMOTE_PACKAGE).is_file():
        raise ValueError(f"mkdocs.yml lists {REMOTE_PAGE}, but {REMOTE_PACKAGE} does not exist")
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages and their images; drop the remote page unless the nav lists it."""
    from mkdocs.structure.files import File

    for page in _STATE["pages"]:
        files.append(File.generated(config, page.path, content=page.markdown))
    for name, source in _STATE["assets"].items():
        files.append(File.generated(config, name, abs_src_path=str(source)))
    if not _STATE["remote"]:
        remote = files.get_file_from_path(REMOTE_PAGE)
        if remote is not None:
            files.remove(remote)
    return files


def main(argv: list[str]) -> int:
    """``python scripts/docs_pages.py OUTDIR``: write the generated pages to OUTDIR."""
    if len(argv) != 1:
        print("usage: python scripts/docs_pages.py OUTDIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    pages, assets = generate()
    for page in pages:
        (out / page.path).parent.mkdir(parents=True, exist_ok=True)
        (out / page.path).write_text(page.markdown, encoding="utf-8")
    for name, source in assets.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / name)
    print(f"{len(pages)} pages, {len(assets)} asset(s) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
