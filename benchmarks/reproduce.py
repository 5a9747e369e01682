"""Compute the numbers that chapters quote from runs longer than their one-minute budget.

One script for every chapter. Each chapter that needs such numbers has a module
``benchmarks/reproduce_<chapter, hyphens as underscores>.py`` with two functions,

    tasks() -> list[tasks.Task]      the independent runs, each with its own seed
    finish(results) -> dict(results=..., settings=..., seeds=...)

``finish`` receives the results that the tasks' outputs build together (:mod:`tasks`) and adds
what follows from them cheaply (derived statistics, constants). This script runs the tasks on the
executor that the environment chooses (local processes, or a Dask cluster: :mod:`tasks`), with
progress and a resumable cache in ``_build/reproduce/``, and writes ``book/results/<chapter>.json``
through :func:`lib.book.results.save_results`: the numbers, the settings and seeds, and for every
task the result paths it wrote and a SHA-256 digest of their values.

Usage (``make reproduce``, ``make reproduce CHAPTERS="poisoning-in-practice"``)::

    python benchmarks/reproduce.py [chapter ...] [--fresh]
        recompute; --fresh ignores outputs cached by a stopped run
    python benchmarks/reproduce.py --check [--sample K] [--budget S] [--seed N] [chapter ...]
        check the committed files against the code (make test runs it): every task's digest
        (a number edited by hand names its file and task), every derived number (finish() on the
        committed task outputs gives the committed results), and K randomly chosen tasks per file
        whose cost is at most S seconds recomputed (the seed is printed, so a failure can be rerun)
    python benchmarks/reproduce.py --adopt CHAPTER
        add the task records to a committed file written before its module had tasks (the
        file's numbers are kept as they are; run --check with a sample afterwards)
    python benchmarks/reproduce.py --scaling CHAPTER [--tasks N]
        time N of CHAPTER's cheapest tasks on a local Dask cluster of 1, 2 and 4 workers

``BOOK_SCALE`` is set to ``full`` unless it is set already (by :func:`main`, not on import: a test
that imports this module leaves the scale of the tests after it alone).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import inspect
import json
import math
import os
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import tasks as taskrun  # noqa: E402

from lib.book.machine import SAME_MACHINE  # noqa: E402
from lib.book.results import _plain, environment, load_results, results_path, save_results  # noqa: E402

PREFIX = "reproduce_"
CACHE = ROOT / "_build" / "reproduce"
#: Agreement of a recomputed task with the committed file. The same code on another machine
#: reorders floating-point sums (other BLAS kernels, thread counts, batch sizes), which moves a
#: float64 result by ~1e-12 relatively; the long trainings behind these files can amplify that,
#: as the ledger's check allows for (lib.book.ledger.COMPARE_RTOL). A number that moved by more than
#: this no longer follows from the code.
CHECK_RTOL = 1e-4
CHECK_ATOL = 1e-9
#: What must agree for a recomputed task to be held to CHECK_RTOL: the host that wrote the file
#: (two hosts alike in CPU name, features and libraries moved some long runs;
#: lib.book.machine.host), its CPU (numba compiles for it, and a wider vector unit sums in
#: another order) and the libraries that do the arithmetic.
#: On another machine a run whose outcome is sensitive to rounding (Adam's tail below the loss
#: threshold, a catapult at a large step) need not agree: measured, greedy-learning's clean seed 19
#: ends at a loss of 3.3e-16 in the file written on 2026-11-26 and 1.9e-7 here, with the same fit
#: step, the same code and the same libraries. There the check reports the difference and passes;
#: `make reproduce` on the machine makes it strict again. Digests and derived numbers are strict
#: everywhere. The fields are lib.book.machine.SAME_MACHINE (the CPU's features among them).


def chapters() -> list[str]:
    """Chapters with a reproduce module, in file-name order."""
    here = Path(__file__).resolve().parent
    return sorted(p.stem[len(PREFIX):].replace("_", "-") for p in here.glob(f"{PREFIX}*.py"))


def module(chapter: str):
    return importlib.import_module(PREFIX + chapter.replace("-", "_"))


def files_of(chapter: str) -> dict[str, tuple]:
    """The committed results files the reproduce module of ``chapter`` writes: name -> (tasks,
    finish). A module writes ``<chapter>.json`` by default; one that writes more lists them in
    ``FILES``."""
    mod = module(chapter)
    if hasattr(mod, "FILES"):
        return dict(mod.FILES)
    if hasattr(mod, "tasks"):
        return {chapter: (mod.tasks, mod.finish)}
    return {chapter: (None, None)}  # a module without tasks: the check says so


def files() -> dict[str, tuple]:
    """Every committed results file a reproduce module writes: name -> (tasks, finish)."""
    return {name: spec for chapter in chapters() for name, spec in files_of(chapter).items()}


def digest(results: dict, paths) -> str:
    """SHA-256 of the values at ``paths`` of (JSON-ready) ``results``."""
    values = [[list(p), taskrun.lookup(results, tuple(p))] for p in paths]
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def task_records(chapter_tasks, results: dict) -> dict:
    """What the committed file says of each task: its cost and the digest of the values at its
    paths (the paths themselves come from the module, so the file stays small)."""
    return {t.key: {"cost": t.cost, "sha256": digest(results, t.writes)} for t in chapter_tasks}


def reproduce(chapter: str, *, fresh: bool = False, progress: bool = True) -> Path:
    """Run one chapter's tasks and write its results file."""
    mod = module(chapter)
    chapter_tasks = mod.tasks()
    cache = CACHE / f"{chapter}-{os.environ.get('BOOK_SCALE', 'fast')}"
    if fresh and cache.exists():
        shutil.rmtree(cache)
    start = time.perf_counter()
    with taskrun.executor() as pool:
        outputs = taskrun.run_tasks(chapter_tasks, pool, cache=cache,
                                    source=inspect.getsource(mod), progress=progress,
                                    label=chapter)
    record = mod.finish(taskrun.assemble(outputs))
    seconds = time.perf_counter() - start
    missing = {"results", "settings", "seeds"} - set(record)
    if missing:
        raise ValueError(f"{mod.__name__}.finish() must return {sorted(missing)} as well")
    plain = json.loads(json.dumps(_plain(record["results"])))
    command = (f"BOOK_SCALE={os.environ.get('BOOK_SCALE', 'fast')} python "
               f"benchmarks/reproduce.py {chapter}")
    path = save_results(chapter, command=command, seconds=seconds,
                        tasks=task_records(chapter_tasks, plain), **record)
    shutil.rmtree(cache, ignore_errors=True)  # written: a later run starts afresh
    return path


def _first_difference(ours, theirs, path=(), *, rtol=0.0, atol=0.0):
    """The first path where two JSON-ready values differ (beyond rtol/atol for numbers)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if set(ours) != set(theirs):
            return path + (sorted(set(ours) ^ set(theirs))[0],)
        for k in ours:
            if (found := _first_difference(ours[k], theirs[k], (*path, k), rtol=rtol,
                                           atol=atol)) is not None:
                return found
        return None
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return path
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if (found := _first_difference(a, b, (*path, i), rtol=rtol, atol=atol)) is not None:
                return found
        return None
    numbers = (int, float)
    if (isinstance(ours, numbers) and isinstance(theirs, numbers)
            and not isinstance(ours, bool) and not isinstance(theirs, bool)):
        return None if math.isclose(ours, theirs, rel_tol=rtol, abs_tol=atol) else path
    return None if ours == theirs else path


def check_file(chapter: str, *, sample: int, budget: float, rng: random.Random,
               pool=None) -> list[str]:
    """Problems of one committed file (empty when it follows from the code)."""
    make_tasks, finish = files()[chapter]
    name = f"book/results/{results_path(chapter).name}"
    if make_tasks is None:
        return [f"{name}: its reproduce module has no tasks() and finish()"]
    try:
        committed = load_results(chapter)
        results = committed["results"]
    except (ValueError, KeyError, TypeError) as err:
        return [f"{name}: not a results file ({err})"]
    by_key = {t.key: t for t in make_tasks()}
    recorded = committed.get("tasks")
    if not isinstance(recorded, dict):
        return [f"{name}: no task records (written before tasks); run make reproduce "
                f"CHAPTERS={chapter}"]
    problems = []
    if set(recorded) != set(by_key):
        extra = sorted(set(recorded) ^ set(by_key))
        problems.append(f"{name}: the tasks of the file and of its module differ: {extra}")
        return problems
    slices = {}
    for key, task in by_key.items():
        try:
            slices[key] = {p: taskrun.lookup(results, p) for p in task.writes}
            ok = digest(results, task.writes) == recorded[key].get("sha256")
        except KeyError as err:
            problems.append(f"{name}: task {key}: {err.args[0]}")
            continue
        if not ok:
            problems.append(f"{name}: task {key}: its committed numbers are not the ones "
                            f"the run wrote (digest mismatch: edited by hand, or the module "
                            f"now lays the task's results out differently)")
    if problems:
        return problems
    rebuilt = json.loads(json.dumps(_plain(finish(taskrun.assemble(slices))["results"])))
    where = _first_difference(rebuilt, results)
    if where is not None:
        owner = next((k for k, t in by_key.items() if any(where[:len(p)] == p
                                                          for p in t.writes)), None)
        problems.append(f"{name}: results at {list(where)} do not follow from the task outputs"
                        + (f" (task {owner})" if owner else " (a derived number)"))
        return problems
    affordable = sorted(k for k, t in by_key.items() if t.cost <= budget)
    chosen = rng.sample(affordable, min(sample, len(affordable)))
    written, here = committed.get("environment", {}), environment()
    strict = all(written.get(k) == here[k] for k in SAME_MACHINE)
    if chosen and not strict:
        other = {k: written.get(k, "not recorded") for k in SAME_MACHINE
                 if written.get(k) != here[k]}
        print(f"  {name}: written on another machine or software ({other}): a recomputed task is "
              f"compared, and a difference reported without failing")
    for key in chosen:
        start = time.perf_counter()
        fresh = pool.submit(taskrun.call, by_key[key]).result() if pool else by_key[key]()
        fresh = json.loads(json.dumps(_plain({"v": [fresh[p] for p in by_key[key].writes]})))
        theirs = [slices[key][p] for p in by_key[key].writes]
        where = _first_difference(fresh["v"], theirs, rtol=CHECK_RTOL, atol=CHECK_ATOL)
        seconds = time.perf_counter() - start
        if where is not None:
            path = list(by_key[key].writes[where[0]]) + list(where[1:])
            got, want = taskrun.lookup(fresh["v"], where), taskrun.lookup(theirs, where)
            text = (f"{name}: task {key}: recomputed {got!r:.60} at {path}, the file has "
                    f"{want!r:.60}")
            if strict:
                problems.append(f"{text}: the committed number no longer follows from the code")
            else:
                print(f"  {text} (another machine: reported, not failed)")
        else:
            print(f"  {name}: task {key} recomputed in {seconds:.1f} s: agrees", flush=True)
    if not chosen:
        print(f"  {name}: no task costs under {budget:g} s: digests and derived numbers only")
    return problems


def adopt(chapter: str) -> int:
    """Record the tasks of a file written before its module had tasks, numbers unchanged."""
    make_tasks, finish = files()[chapter]
    path = results_path(chapter)
    committed = load_results(chapter)
    chapter_tasks = make_tasks()
    slices = {t.key: {p: taskrun.lookup(committed["results"], p) for p in t.writes}
              for t in chapter_tasks}
    rebuilt = json.loads(json.dumps(_plain(finish(taskrun.assemble(slices))["results"])))
    if (where := _first_difference(rebuilt, committed["results"])) is not None:
        print(f"{path}: the tasks do not rebuild the committed results at {list(where)}")
        return 1
    committed["tasks"] = task_records(chapter_tasks, committed["results"])
    path.write_text(json.dumps(committed, indent=1, sort_keys=False) + "\n")
    print(f"{path.relative_to(ROOT)}: {len(chapter_tasks)} task records added")
    return 0


def check(wanted: list[str], *, sample: int, budget: float, seed: int | None) -> int:
    seed = random.SystemRandom().randrange(10**6) if seed is None else seed
    print(f"checking committed results (sample {sample} task(s) per file under {budget:g} s, "
          f"seed {seed})", flush=True)
    rng = random.Random(seed)
    problems = []
    known = files()
    # every file a wanted chapter's module writes, whatever its name (e.g. a chapter's probe file)
    names = [n for chapter in wanted for n in files_of(chapter)]
    if set(wanted) == set(chapters()):  # every committed file must come from a module
        loose = sorted(p.stem for p in results_path("ledger").parent.glob("*.json")
                       if p.stem != "ledger" and p.stem not in known)
        problems += [f"book/results/{n}.json: no reproduce module writes it" for n in loose]
    with taskrun.executor(workers=1) as pool:
        for name in names:
            if not results_path(name).exists():
                problems.append(f"{name}: no committed results file")
                continue
            problems += check_file(name, sample=sample, budget=budget, rng=rng, pool=pool)
    wanted = names
    for line in problems:
        print(line)
    print(f"{len(wanted) - len({p.split(':')[0] for p in problems})} passed, "
          f"{len({p.split(':')[0] for p in problems})} failed" if problems
          else f"{len(wanted)} results files follow from the code")
    return 1 if problems else 0


def scaling(chapter: str, count: int) -> int:
    """Wall time of ``count`` cheap tasks of ``chapter`` on 1, 2 and 4 local Dask workers."""
    chosen = sorted(module(chapter).tasks(), key=lambda t: t.cost)[:count]
    print(f"{chapter}: {len(chosen)} tasks on a local Dask cluster ({os.cpu_count()} cores)")
    times, outputs = {}, {}
    for workers in (1, 2, 4):
        os.environ["BOOK_DASK_SCHEDULER"] = f"local:{workers}"
        with taskrun.executor() as pool:
            pool.submit(taskrun.call, chosen[0]).result()  # workers started and warm
            start = time.perf_counter()
            outputs[workers] = taskrun.run_tasks(chosen, pool, progress=False)
            times[workers] = time.perf_counter() - start
    def text(out):  # the outputs as the JSON file would hold them
        return json.dumps(_plain({k: [[list(p), v] for p, v in o.items()] for k, o in out.items()}))

    same = all(text(outputs[w]) == text(outputs[1]) for w in times)
    print("| workers | seconds | speed-up over 1 |\n|---:|---:|---:|")
    for workers, seconds in times.items():
        print(f"| {workers} | {seconds:.1f} | {times[1] / seconds:.2f} |")
    print(f"outputs identical across worker counts: {same}")
    return 0 if same else 1


def main(argv: list[str]) -> int:
    os.environ.setdefault("BOOK_SCALE", "full")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--sample", type=int, default=1)
    parser.add_argument("--budget", type=float, default=15.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--adopt", help="a committed file's name, e.g. gradient-flow")
    parser.add_argument("--scaling")
    parser.add_argument("--tasks", type=int, default=8)
    args = parser.parse_args(argv)
    known = chapters()
    if args.adopt:
        if args.adopt not in files():
            parser.error(f"no reproduce module writes {args.adopt!r}; known: {sorted(files())}")
        return adopt(args.adopt)
    if args.scaling:
        if args.scaling not in known:
            parser.error(f"no reproduce module for {args.scaling!r}; known: {known}")
        return scaling(args.scaling, args.tasks)
    wanted = args.chapters or known
    unknown = [c for c in wanted if c not in known]
    if unknown:
        print(f"no reproduce module for {unknown}; known chapters: {known}", file=sys.stderr)
        return 2
    if args.check:
        return check(wanted, sample=args.sample, budget=args.budget, seed=args.seed)
    for chapter in wanted:
        start = time.perf_counter()
        path = reproduce(chapter, fresh=args.fresh)
        print(f"{chapter}: wrote {path.relative_to(ROOT)} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
