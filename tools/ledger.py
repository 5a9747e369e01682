"""The reproductions ledger from the command line (lib/book/ledger.py explains the ledger and its
rule).

Usage::

    python tools/ledger.py write   # collect _build/ledger/*.json into book/results/ledger.json
    python tools/ledger.py check   # compare _build/ledger/*.json with book/results/ledger.json

``make ledger`` executes every chapter and runs ``write``; ``make test`` and ``make book`` execute
every chapter and run ``check``, which fails (exit status 1) with one line per moved number,
changed status, missing or new entry, and per entry whose status does not follow from its numbers
by the ledger's rule (in the run or in the committed file), each naming its chapter and entry. A
malformed ledger file fails with a message that names the file. On another machine than the one
that wrote the committed ledger (``ledger.written_here``), moved numbers are counted and printed
but do not fail the check; statuses, entries and words still must agree (``ledger.SAME_MACHINE``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.book import ledger  # noqa: E402  (after the path is set)


def _run(args: argparse.Namespace) -> int:
    fresh = ledger.collect()
    if not fresh and args.command == "check" and args.executed_only:
        # an incremental build that re-read only pages without code (an audit appendix) executed
        # no chapter, so it recorded nothing to compare
        print(f"ledger: no chapter was executed in this build ({ledger.ledger_dir()} is empty): "
              "nothing to check")
        return 0
    if not fresh:
        print(f"ledger: no entries in {ledger.ledger_dir()}: execute the chapters first")
        return 1
    ruled = ledger.rule_problems({c: d["entries"] for c, d in fresh.items()})
    if ruled:
        print(f"ledger: statuses in {ledger.ledger_dir()} that the rule does not give:")
        print("\n".join(f"  {line}" for line in ruled))
        return 1
    if args.command == "write":
        path = ledger.save(fresh, args.committed)
        total = sum(len(d["entries"]) for d in fresh.values())
        print(f"ledger: wrote {total} entries of {len(fresh)} chapters to {path}")
        return 0
    committed = ledger.load(args.committed)
    problems = [f"{line} (in {args.committed})" for line in ledger.rule_problems(committed)]
    same_machine = ledger.written_here(args.committed)
    problems += ledger.compare(fresh, committed, same_machine=same_machine)
    if not same_machine:
        moved = ledger.compare(fresh, committed)
        print(f"ledger: {args.committed} was written on another machine; {len(moved)} number(s) "
              "moved beyond the same machine's tolerance are listed, not failed (statuses, "
              "entries and words are compared exactly):")
        print("\n".join(f"  {line:.200}" for line in moved if line not in problems))
    if not args.executed_only:
        problems += [
            f"{chapter}: its entries are committed but the chapter recorded none in this run"
            for chapter in sorted(set(committed) - set(fresh))
        ]
    if problems:
        print(f"ledger: the chapters' entries differ from {args.committed}:")
        print("\n".join(f"  {line}" for line in problems))
        print("If the change is intended, run `make ledger` and commit book/results/ledger.json.")
        return 1
    # compare() skips chapters run at another scale: the committed ledger holds the default's only
    compared = {c: d for c, d in fresh.items() if d["scale"] == "fast"}
    total = sum(len(d["entries"]) for d in compared.values())
    print(f"ledger: {total} entries of {len(compared)} chapters agree with {args.committed}"
          + ("" if same_machine else " in their statuses, fields and words (numbers: above)"))
    if len(compared) < len(fresh):
        skipped = ", ".join(sorted(set(fresh) - set(compared)))
        print(f"ledger: not compared (run at another scale than the default): {skipped}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("write", "check"))
    parser.add_argument("--committed", type=Path, default=ledger.LEDGER_PATH,
                        help="the committed ledger (default: %(default)s)")
    parser.add_argument("--executed-only", action="store_true",
                        help="check only the chapters this run executed (a Sphinx build "
                             "re-executes only the pages that changed since the last one)")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except ValueError as error:  # a malformed ledger file: the message names it
        print(f"ledger: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
