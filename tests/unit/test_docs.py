"""The docs stand alone: no pointer to notes outside the repository, a README that stays a
front page, relative links (and their anchors) that resolve, and a site that builds.

The link check follows GitHub's rendering (the README and docs/ are read there): a link's
path is relative to the file holding it, and ``#anchor`` must be the GitHub slug of a heading
of the target. ``mkdocs build --strict`` (mkdocs.yml validates links, anchors and the nav)
checks the same pages as a site.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_CHARS = 20_000
# Notes that live outside the repository; nothing in it may send a reader there. Spelled in
# two parts so that this file does not mention them itself.
OUTSIDE_NOTES = tuple(name + ".md" for name in ("DESIGN", "ENVIRONMENT"))

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_HTML_ID = re.compile(r"<a\s+[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (code blocks become empty lines)."""
    lines, fence = [], None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            lines.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return lines


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, every character but
    letters, digits, spaces, hyphens and underscores removed, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a markdown file offers: heading slugs (repeats numbered -1, -2, ... as on
    GitHub) and explicit ``<a name|id="...">`` targets."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for line in _prose_lines(text):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    found.update(_HTML_ID.findall(text))
    return found


def relative_links(path: Path) -> list[str]:
    """The link targets of a markdown file that are neither URLs nor absolute paths (code
    blocks and code spans excluded)."""
    prose = _INLINE_CODE.sub("", "\n".join(_prose_lines(path.read_text(encoding="utf-8"))))
    targets = _LINK.findall(prose) + _REF_DEF.findall(prose)
    return [t for t in targets if not _SCHEME.match(t) and not t.startswith("/")]


def test_no_file_points_at_notes_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    offenders = []
    for name in filter(None, tracked):
        path = REPO / name.decode()
        if not path.is_file():  # deleted in the work tree, or a submodule
            continue
        data = path.read_bytes()
        offenders += [f"{name.decode()}: {note}" for note in OUTSIDE_NOTES if note.encode() in data]
    assert not offenders, (
        "these files refer to notes that are not in the repository; point at "
        "docs/invariants.md or docs/brokers.md instead:\n" + "\n".join(offenders)
    )


def test_readme_is_a_front_page() -> None:
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_MAX_CHARS, (
        f"README.md has {size:,} characters (at most {README_MAX_CHARS:,}): move user-guide "
        "material to a page under docs/ and link it"
    )


def test_relative_links_resolve() -> None:
    broken = []
    for source in _markdown_files():
        for target in relative_links(source):
            file_part, _, anchor = target.partition("#")
            dest = (source.parent / file_part).resolve() if file_part else source
            where = f"{source.relative_to(REPO)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where} (no heading with anchor #{anchor})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_slugs_follow_github() -> None:
    assert github_slug("Frozen hosts and zombies (fencing)") == "frozen-hosts-and-zombies-fencing"
    assert github_slug("The `statekeeper` command") == "the-statekeeper-command"
    assert github_slug("10. An operator's read never writes") == "10-an-operators-read-never-writes"
    assert github_slug("Snapshot + tail, full replay") == "snapshot--tail-full-replay"


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    return []


def test_the_site_nav_lists_every_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    listed = _nav_pages(config["nav"])
    assert sorted(set(listed)) == sorted(pages), "mkdocs.yml's nav must list every docs/ page"
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml's nav"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.fail("install mkdocs (requirements-dev.in; make install)")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}{result.stdout}"
