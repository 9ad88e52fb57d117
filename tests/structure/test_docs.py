"""The documentation site builds in mkdocs' strict mode: a broken link, anchor or nav entry fails the build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import ROOT


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``project``'s mkdocs.yml into ``site`` (mkdocs-material is a dev dependency)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly(tmp_path):
    r = build(ROOT, tmp_path / "site")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reproduction" / "dp-swd" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "index.html").read_text()  # rendered from the docstrings
    assert "PrivacyLedger" in api and "GaussianProjectionRelease" in api and "Calibrated" in api


def test_every_nav_page_exists():
    def pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, dict):
            for v in node.values():
                yield from pages(v)
        else:
            for v in node:
                yield from pages(v)

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    missing = [p for p in pages(nav) if not (ROOT / "docs" / p).is_file()]
    assert not missing, missing


def test_a_broken_link_fails_the_build(tmp_path):
    """The site's own settings (strict, link validation) on a one-page site: a link to no page fails the build."""
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "docs" / "index.md").write_text("# Home\n\n[a page that does not exist](no-such-page.md)\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(plugins=["search"], nav=[{"Home": "index.md"}])
    (project / "mkdocs.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    r = build(project, tmp_path / "site")
    assert r.returncode != 0 and "no-such-page.md" in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_architecture_page_names_files_that_exist():
    """Its "to change X, open Y" table stays true: every file or folder it names is there."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = {m for m in re.findall(r"`((?:dpgen|tests|configs|scripts|evidence|docs)/[^`<* ]*)`", text)}
    assert len(named) > 30
    missing = sorted(p for p in named if not (ROOT / p.split(" ")[0]).exists())
    assert not missing, f"docs/ARCHITECTURE.md names what is not there: {missing}"


LONGEST_LINE = 300  # characters; a longer line is prose to rewrap or a table cell to move into a note below


def test_no_doc_line_is_longer_than_300_characters():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    long = [f"{p.relative_to(ROOT)}:{i} ({len(line)} characters)"
            for p in pages for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > LONGEST_LINE]
    assert not long, f"{len(long)} doc lines over {LONGEST_LINE} characters:\n" + "\n".join(long)
