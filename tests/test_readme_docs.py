"""The README stays short and its links lead somewhere: under 200 lines, every relative link in
it and in docs/*.md names a file of this repository, and each docs page it links to stands on its
own (a title, a way back to the README).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# pages written alongside this one and merged with it; once they are in the tree they are checked
# like every other link (remove a name here when its page lands)
PENDING = {
    "docs/live-verdict.md",
    "docs/security.md",
}


def links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(path.read_text(encoding="utf-8"))
            if not re.match(r"[a-z]+:", m.group(1))]  # fmt: skip


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, len(lines)


def test_every_relative_link_names_a_file() -> None:
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in links(page):
            resolved = (page.parent / target).resolve()
            rel = (
                resolved.relative_to(ROOT).as_posix()
                if resolved.is_relative_to(ROOT)
                else str(resolved)
            )
            if not resolved.exists() and rel not in PENDING:
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert missing == []


def test_docs_pages_stand_on_their_own() -> None:
    pages = [t for t in links(ROOT / "README.md") if t.startswith("docs/") and t.endswith(".md")]
    assert len(pages) >= 8, pages
    for target in pages:
        page = ROOT / target
        if not page.exists():
            continue  # a pending page: the link test above names it
        text = page.read_text(encoding="utf-8")
        assert text.startswith("# "), target
        assert "../README.md" in text or target in PENDING, (
            f"{target} does not link back to the README"
        )


def test_the_pages_the_readme_moved_out_keep_their_content() -> None:
    """What the README used to hold in full is still somewhere a reader finds it."""
    expect = {
        "docs/containers.md": "docker exec -i NAME",
        "docs/vllm.md": "What a green health check proves",
        "docs/gpu-nccl.md": "Flight Recorder",
        "docs/accuracy.md": "Mechanisms known",
        "docs/performance.md": "Against the manual sequence",
        "docs/reliability.md": "Every deadline held",
        "docs/checks.md": "Writing field knowledge",
        "docs/terminal.md": "Bad arguments fail before the window",
    }
    for page, phrase in expect.items():
        assert phrase in (ROOT / page).read_text(encoding="utf-8"), (page, phrase)
