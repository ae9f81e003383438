#!/usr/bin/env python3
"""forms_compare: the library's other kernel forms against the default, one process per run.

Some kernel forms stay behind an environment setting (README, "Environment variables"), and
some defaults keep their predecessor there: MLA's 2-CTA cluster form (IGNIS_MLA_WGMMA=3, opt-in)
and one-group split merge (IGNIS_MLA_MERGE_GROUPS=1, the old default), prefill's cp.async-only form
(IGNIS_PREFILL_WGMMA=1, the old default) and TMA with ping-pong (=4, opt-in). This script times
each on the shapes it is meant for with `ignis bench` (the same timing as the default suite), the
default path and the form alternating, REPS times each, and prints a markdown table row by row
(a time box that stops it keeps the rows done): the medians of the runs' medians and the speedup
of the form (default time / form time; above 1: the form is faster). The settings
are read once per process, which is why every run is its own process. tools/gpu-check runs it as
its `forms` step.

Usage: python3 bench/forms_compare.py [--ignis build-gpu/ignis] [--reps 2] [--only TEXT]
                                      [--markdown FILE] [--jsonl FILE]
Exit status 1 when a run failed or printed no result, else 0 (a form slower than the default is a
finding, not a failure).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# (setting, value, routine, ignis bench shape flags): the shapes each form is meant for
FORMS = [
    ("IGNIS_MLA_WGMMA", "3", "mla", "--batch 128 --tokens 1 --kv-len 4096 --q-heads 128 --page-size 64"),
    ("IGNIS_MLA_WGMMA", "3", "mla", "--batch 1 --tokens 2048 --kv-len 10240 --q-heads 128 --page-size 64"),
    ("IGNIS_MLA_MERGE_GROUPS", "1", "mla", "--batch 1 --tokens 1 --kv-len 32768 --q-heads 128 --page-size 64"),
    ("IGNIS_MLA_MERGE_GROUPS", "1", "mla", "--batch 4 --tokens 1 --kv-len 32768 --q-heads 16 --page-size 64"),
    ("IGNIS_PREFILL_WGMMA", "1", "single_prefill",
     "--tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"),
    ("IGNIS_PREFILL_WGMMA", "1", "single_prefill",
     "--tokens 16384 --kv-len 16384 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"),
    ("IGNIS_PREFILL_WGMMA", "1", "batch_prefill_ragged",
     "--batch 4 --tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask none"),
    ("IGNIS_PREFILL_WGMMA", "4", "single_prefill",
     "--tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"),
    ("IGNIS_PREFILL_WGMMA", "4", "single_prefill",
     "--tokens 16384 --kv-len 16384 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"),
    ("IGNIS_PREFILL_WGMMA", "4", "batch_prefill_ragged",
     "--batch 4 --tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask none"),
]


def run_once(ignis, routine, flags, setting, value, iters):
    """One `ignis bench` process; its bench record, or None with the reason printed."""
    env = dict(os.environ)
    env.pop(setting, None)
    if value is not None:
        env[setting] = value
    cmd = [ignis, "bench", routine] + flags.split() + ["--iters", str(iters), "--json"]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"timed out: {setting}={value} {' '.join(cmd)}", file=sys.stderr)
        return None
    records = []
    for line in done.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("record") == "bench" and record.get("routine") == routine:
            records.append(record)
    if done.returncode != 0 or not records:
        print(f"failed (exit {done.returncode}): {setting}={value} {' '.join(cmd)}\n{done.stderr[-2000:]}",
              file=sys.stderr)
        return None
    return records[-1]


def rate(record):
    """TFLOP/s where the routine counts FLOPs, else GB/s."""
    if record.get("tflops"):
        return f"{record['tflops']:.0f} TF"
    return f"{record.get('gbps', 0):.0f} GB/s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ignis", default="build-gpu/ignis")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--only", default="", help="cases whose setting, routine or flags contain this")
    parser.add_argument("--markdown")
    parser.add_argument("--jsonl")
    args = parser.parse_args()

    rows, failed, lines = [], 0, []
    head = ["# Kernel forms against the default (bench/forms_compare.py)", "",
            "Medians of `ignis bench` medians over the runs, default and form alternating, one process a "
            "run; speedup = default / form.", "",
            "| form | routine, shape | default us | form us | speedup | runs |", "|---|---|---|---|---|---|"]
    print("\n".join(head), flush=True)

    def write_out():
        """The files as they stand: a time box that ends the run early leaves the finished rows."""
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write("\n".join(head + rows) + "\n")
        if args.jsonl:
            with open(args.jsonl, "w") as f:
                f.write("\n".join(lines) + ("\n" if lines else ""))

    for setting, value, routine, flags in FORMS:
        if args.only and args.only not in f"{setting}={value} {routine} {flags}":
            continue
        times = {None: [], value: []}
        last = {}
        for _ in range(args.reps):
            for form in (None, value):
                record = run_once(args.ignis, routine, flags, setting, form, args.iters)
                if record is None:
                    failed += 1
                    continue
                times[form].append(record["median_us"])
                last[form] = record
                lines.append(json.dumps({"record": "form", "setting": setting, "value": form, **record}))
        if not times[None] or not times[value]:
            rows.append(f"| {setting}={value} | {routine} {flags} | failed | | | |")
        else:
            base, form_us = statistics.median(times[None]), statistics.median(times[value])
            rows.append(f"| {setting}={value} | {last[None]['routine']} {last[None]['shape']} on "
                        f"{last[None].get('device', '?')} | {base:.1f} ({rate(last[None])}) | "
                        f"{form_us:.1f} ({rate(last[value])}) | {base / form_us:.3f} | "
                        f"{len(times[None])}+{len(times[value])} |")
        print(rows[-1], flush=True)
        write_out()
    write_out()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
