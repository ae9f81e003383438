"""The Markdown report the benchmark scripts end with (decode_compare, prefill_compare, mla_compare,
sampling_compare, decode_block_table, prefill_block_table, decode_plan_time): the table of targets
a comparison is held to, and printing the report and saving it where --markdown says.

A target is (description, measured, bar, ok): the measured value and the bar as the text the table
shows, ok whether the measurement meets the bar.
"""


def target_table(checks):
    """The Markdown lines of the targets table: its header and a row per target."""
    lines = ["| target | measured | bar | result |", "|---|---|---|---|"]
    return lines + [f"| {d} | {m} | {b} | {'PASS' if ok else 'FAIL'} |" for d, m, b, ok in checks]


def targets_with_count(checks, note=""):
    """The targets table between blank lines, then the line counting the targets met (note appended
    to it); and the descriptions of the targets missed."""
    failed = [d for d, _, _, ok in checks if not ok]
    return [""] + target_table(checks) + ["", f"{len(checks) - len(failed)}/{len(checks)} targets met{note}"], failed


def emit(lines, markdown):
    """Print the report and, when markdown is a path, write it there."""
    text = "\n".join(lines)
    print(text)
    if markdown:
        with open(markdown, "w") as f:
            f.write(text + "\n")
