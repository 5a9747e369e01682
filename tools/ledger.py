"""The reproductions ledger from the command line (lib/ledger.py explains the ledger).

Usage::

    python tools/ledger.py write   # collect _build/ledger/*.json into book/results/ledger.json
    python tools/ledger.py check   # compare _build/ledger/*.json with book/results/ledger.json

``make ledger`` executes every chapter and runs ``write``; ``make test`` and ``make book`` execute
every chapter and run ``check``, which fails (exit status 1) with one line per moved number,
changed status, missing or new entry, each naming its chapter and entry.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib import ledger  # noqa: E402  (after the path is set)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("write", "check"))
    parser.add_argument("--committed", type=Path, default=ledger.LEDGER_PATH,
                        help="the committed ledger (default: %(default)s)")
    parser.add_argument("--executed-only", action="store_true",
                        help="check only the chapters this run executed (a Sphinx build "
                             "re-executes only the pages that changed since the last one)")
    args = parser.parse_args(argv)
    fresh = ledger.collect()
    if not fresh:
        print(f"ledger: no entries in {ledger.ledger_dir()}: execute the chapters first")
        return 1
    if args.command == "write":
        path = ledger.save(fresh, args.committed)
        total = sum(len(d["entries"]) for d in fresh.values())
        print(f"ledger: wrote {total} entries of {len(fresh)} chapters to {path}")
        return 0
    committed = ledger.load(args.committed)
    problems = ledger.compare(fresh, committed)
    if not args.executed_only:
        problems += [
            f"{chapter}: its entries are committed but the chapter recorded none in this run"
            for chapter in sorted(set(committed) - set(fresh))
        ]
    if problems:
        print(f"ledger: the chapters' reproduced numbers differ from {args.committed}:")
        print("\n".join(f"  {line}" for line in problems))
        print("If the change is intended, run `make ledger` and commit book/results/ledger.json.")
        return 1
    total = sum(len(d["entries"]) for d in fresh.values())
    print(f"ledger: {total} entries of {len(fresh)} chapters agree with {args.committed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
