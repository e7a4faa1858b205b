"""Write the results ledger as one Markdown page (``docs/results.md``): a table per ``results/*.json`` entry.

python -m launch.results_table                 # rewrite docs/results.md from results/
python -m launch.results_table --check         # exit 1 when docs/results.md is not the ledger's page
"""

from __future__ import annotations

import os
import sys

from absl import app, flags

from experiment.ledger import ROOT
from experiment.ledger_table import load_entries, render

F = flags.FLAGS
flags.DEFINE_string("results", os.path.join(ROOT, "results"), "the ledger's directory of <name>.json entries")
flags.DEFINE_string("out", os.path.join(ROOT, "docs", "results.md"), "the page to write")
flags.DEFINE_bool("check", False, "write nothing; exit 1 when the page differs from the ledger's")


def main(argv):
    """Render the ledger and write (or, with ``--check``, compare) the page."""
    del argv
    entries = load_entries(F.results)
    if not entries:
        raise app.UsageError(f"--results={F.results}: no *.json ledger entries there")
    page = render(entries)
    if F.check:
        old = open(F.out, encoding="utf-8").read() if os.path.exists(F.out) else None
        if old != page:
            print(f"{F.out} is not the ledger's page: run python -m launch.results_table", file=sys.stderr)
            sys.exit(1)
        return
    with open(F.out, "w", encoding="utf-8") as f:
        f.write(page)
    print(F.out)


if __name__ == "__main__":
    app.run(main)
