"""`python -m deployments.reference_docs [--check]`: rewrite the pages, or exit 1 naming each that is out of date."""

from __future__ import annotations

import sys

from deployments.reference_docs import COMMAND, ROOT, pages


def main(argv: list[str]) -> int:
    written = pages()
    if "--check" in argv:
        stale = [p for p, text in written.items() if not p.exists() or p.read_text() != text]
        for page in stale:
            print(f"{page.relative_to(ROOT)} is out of date: run {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for page, text in written.items():
        page.write_text(text)
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
