"""Run the speed benchmarks and write the documentation's benchmarks page.

    radix-auction bench [--benches env,engine,...] [--quick] [--commands reproduce,markets,...] [--full]
                        [--out docs/benchmarks.md [--update]]

Each registered benchmark (`experiments.bench.BENCHES`, in its order) is one section of the page:
what it measures, its table (where it compares things, their ratios from the same run) and the
command that re-runs that section alone. A benchmark whose optional dependency is missing (Ray for
`rllib`) is a section of one line saying so. The page opens with the command, the machine and the
date (`experiments.provenance`), and ends with the figures measured by hand (the commands' and the
CI's wall times, instruction counts), included from BY_HAND, which this command never writes, so
regenerating the page keeps them. `--quick` runs every benchmark at small sizes (minutes in all):
a check that they run, not figures to quote. `--commands` also times whole commands on each core
(the `cores` bench; `--full`: `compare` at its defaults). Without `--out` the page is printed.
`--update` replaces only the sections of the benches run in the page at `--out` and keeps the
others, naming each section it regenerated, with its command, date and machine, under the page's
own provenance line; without it, a page at `--out` holding sections that the run would drop is
refused rather than overwritten.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..argtypes import names, optional_names, output_file
from ..bench import BENCHES, COMMANDS, Bench, bench_names, get_bench
from ..errors import UsageError
from ..provenance import made_by
from .bench_page import Page

BY_HAND = Path(__file__).resolve().parents[1] / "bench" / "by_hand.md"
"""The hand-maintained part of the page: figures no benchmark here measures."""
INTRO = ("No test asserts a time. A time is a sample of one machine's speed, which drifts from minute to minute on "
         "a shared machine; where a benchmark compares things, its ratios come from one run, with the things "
         "compared measured side by side.")

QUICK_NOTE = ("!!! note \"A quick run\"\n    Made with `--quick`: every benchmark at small sizes, which shows that they "
              "run and what they measure; the figures are not the benchmarks' own (run the command without "
              "`--quick` for those).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benches", type=names, default=None,
                        help=f"comma-separated, of {','.join(bench_names())} (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (minutes in all): checks that they run, not figures to quote")
    parser.add_argument("--commands", type=optional_names, default=[],
                        help=f"comma-separated whole commands, of {','.join(COMMANDS)}, that the benches timing "
                        "commands (cores) run on each core: minutes each (default none)")
    parser.add_argument("--full", action="store_true",
                        help="with --commands compare: compare at its defaults (about 15 minutes per core)")
    parser.add_argument("--out", type=output_file, default=None,
                        help="the page to write, e.g. docs/benchmarks.md (default: print it)")
    parser.add_argument("--update", action="store_true",
                        help="with --out: replace only the sections of the benches run in that page, keeping the others")


def section(bench: Bench, quick: bool, commands: tuple[str, ...] = (), full: bool = False) -> str:
    """One benchmark's section: heading, what it measures, its table (or why it was skipped), the
    command that re-runs it. A bench that times commands runs `commands` (`full`: at full size)."""
    commands = commands if bench.times_commands else ()
    rerun = (f"radix-auction bench --benches {bench.name}" + (" --quick" if quick else "")
             + (f" --commands {','.join(commands)}" if commands else "") + (" --full" if full and commands else ""))
    head = [f"## {bench.title}", "", bench.measures, ""]
    if missing := bench.missing():
        return "\n".join([*head, f"Skipped: needs {', '.join(f'`{m}`' for m in missing)}, which is not installed.",
                          ""])
    start = time.perf_counter()
    more = {"commands": commands, "full": full} if bench.times_commands else {}
    table = bench.table_function()(quick, **more)
    took = time.perf_counter() - start
    return "\n".join([*head, table.markdown(), "",
                      f"Re-run this section: `{rerun}` ({took:.1f} s here); `python -m experiments.bench.{bench.name} "
                      f"--help` for its own options and more detail.", ""])


def page(args: argparse.Namespace, sections: list[str]) -> str:
    """The whole page: title, provenance, the sections, the hand-maintained part."""
    quick = [QUICK_NOTE, ""] if args.quick else []
    return "\n".join(["# Benchmarks", "", made_by(args), INTRO, "", *quick, *sections, hand_kept()])


def hand_kept() -> str:
    """The page's last section: the figures measured by hand, from BY_HAND."""
    return "\n".join(["## Measured by hand", "",
                      f"Kept in `experiments/bench/{BY_HAND.name}` (the page includes it; edit it there).", "",
                      BY_HAND.read_text().strip(), ""])


def page_to_update(args: argparse.Namespace, names: list[str]) -> Page | None:
    """With `--update`, the page at `args.out` whose sections of the benches `names` the run replaces;
    None without. Checked before any bench runs: UsageError where there is no page to update, where
    the page and the run differ in `--quick`, or, without `--update`, where the page at `args.out`
    holds sections of benches the run leaves out, which writing it would drop."""
    held = Page.read(args.out.read_text()) if args.out is not None and args.out.is_file() else None
    if not args.update:
        if held and (dropped := [b.name for b in BENCHES if b.title in held.sections and b.name not in names]):
            raise UsageError(f"{args.out} holds the sections of {', '.join(dropped)}, which this run would drop: "
                             "add --update to replace only the sections run, or name another --out")
        return None
    if held is None:
        raise UsageError("--update needs --out naming the page to update, which must exist")
    if held.holds_line(QUICK_NOTE.splitlines()[0]) != args.quick:
        made, other = ("with", "without") if args.quick else ("without", "with")
        raise UsageError(f"--update: {args.out} was made {other} --quick; regenerate the whole page to show "
                         f"figures made {made} it")
    return held


def run(args: argparse.Namespace) -> None:
    names = args.benches or list(bench_names())
    if unknown := [n for n in names if n not in bench_names()]:
        raise UsageError(f"--benches: unknown bench(es) {', '.join(unknown)}; valid: {', '.join(bench_names())}")
    commands = tuple(c for c in args.commands if c)
    if unknown := [c for c in commands if c not in COMMANDS]:
        raise UsageError(f"--commands: unknown command(s) {', '.join(unknown)}; valid: {', '.join(COMMANDS)}")
    kept = page_to_update(args, names)
    sections = []
    for name in names:
        print(f"bench {name}...", file=sys.stderr, flush=True)
        sections.append(section(get_bench(name), args.quick, commands, args.full))
    if kept is None:
        text = page(args, sections)
    else:
        fresh = {get_bench(name).title: text for name, text in zip(names, sections)}
        text = kept.with_sections(fresh, [b.title for b in BENCHES], made_by(args), hand_kept())
    if args.out is None:
        print(text)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
