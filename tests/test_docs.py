"""The README is a front page and its links land; every documentation page is on the site.

`make lint` builds the site (`mkdocs build --strict`), which checks the links between the pages of `docs/`. The
README and the examples' READMEs are not part of the site (GitHub shows them), so their links into `docs/` and
the anchors they name are checked here, with the slugs the site gives its headings (Python-Markdown's `toc`).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
READMES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "examples").glob("*/README.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _headings(page: Path) -> list[str]:
    """The Markdown headings of a page, outside fenced code blocks (a fence's info string has no backtick, so a line
    that begins with a code span of backticks opens none)."""
    headings, fence = [], ""
    for line in page.read_text(encoding="utf-8").splitlines():
        opening = re.match(r"\s*(`{3,}|~{3,})[^`]*$", line)
        if fence:
            if re.fullmatch(rf"\s*{fence[0]}{{{len(fence)},}}\s*", line):
                fence = ""
        elif opening:
            fence = opening.group(1)
        elif m := re.match(r"#{1,6} (.+)", line):
            headings.append(m.group(1))
    return headings


def _anchors(page: Path) -> set[str]:
    from markdown.extensions.toc import slugify  # what the site's toc extension names each heading

    text = (re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h).replace("`", "") for h in _headings(page))
    return {slugify(t, "-") for t in text}


def test_readme_is_a_front_page_with_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: reference material belongs in docs/"
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    commands = {line.split("#")[0].strip() for block in blocks for line in block.splitlines()}
    assert {"make demo", "make test"} <= commands  # CI runs the README's test command (.ci/run)
    assert "(docs/index.md)" in readme


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_links_land_on_a_file_and_heading(readme):
    broken = []
    for link in LINK.findall(readme.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        path, _, anchor = link.partition("#")
        target = (readme.parent / path).resolve() if path else readme
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            broken.append(f"{link}: no heading with this anchor in {target.relative_to(ROOT)}")
    assert not broken, f"{readme.relative_to(ROOT)}: " + "; ".join(broken)


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_pages(v)]
    return [p for item in nav for p in _nav_pages(item)]


def test_every_docs_page_is_in_the_site_nav_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    assert config["validation"]["anchors"] == "warn" and config["validation"]["omitted_files"] == "warn"


def test_every_benchmark_is_in_both_tables_and_the_quick_set_exists():
    """``benchmarks/README.md`` lists every benchmark as FOLDER/NAME (what it needs and takes), the docs page lists
    it in its folder's section, and ``make bench-quick`` runs only scripts that are there."""
    import importlib.util

    bench = ROOT / "benchmarks"
    scripts = sorted(
        p.relative_to(bench).as_posix()
        for p in [*bench.glob("*/*.py"), *bench.glob("*/*.sh")]
        if not p.name.startswith("_") and not p.parent.name.startswith("_")
    )
    assert len(scripts) > 30
    readme = (bench / "README.md").read_text(encoding="utf-8")
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## [^\n]*`benchmarks/(\w+)/`\n(.*?)(?=^## |\Z)", page, flags=re.S | re.M))
    missing = [s for s in scripts if f"| `{s}` |" not in readme]
    misplaced = [s for s in scripts if f"| `{s.split('/')[1]}` |" not in sections.get(s.split("/")[0], "")]
    assert not missing, f"benchmarks/README.md lacks {missing}"
    assert not misplaced, f"docs/benchmarks.md lacks {misplaced} in their folder's section"
    spec = importlib.util.spec_from_file_location("bench_run_all", bench / "run_all.py")
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    assert len(run_all.QUICK) >= 3 and all(script in scripts for script, *_ in run_all.QUICK)
    # gpu/ runs on a lent GPU (gpu_check.sh), not in `make bench`
    assert [(s,) for s in scripts if s.endswith(".py") and not s.startswith("gpu/")] == run_all.every_script()
