"""How an evaluation's episodes end, per task family (experiment/failures.py): successes, wrong results, loops (and
what they repeat), wandering to the step limit, early stops, errors.

  python -m launch.failures --episodes=runs/pipeline/eval/sft          # an evaluation (its seed*/ collections)
  python -m launch.failures --episodes=data/heldout-oracle --top=20    # any collection directory
"""

from __future__ import annotations

import os

from absl import app, flags

from experiment.failures import ending, render, tabulate
from rollout.recording import iter_episodes

F = flags.FLAGS
flags.DEFINE_string("episodes", None, "a collection directory (with episodes/) or an evaluation's (with seed*/ ones)")
flags.DEFINE_integer("top", 10, "the commonest loops to list")
flags.mark_flag_as_required("episodes")


def collections_under(path: str) -> list[str]:
    """``path`` when it is a collection (has episodes/), else its sub-directories that are, sorted; UsageError when
    there is none."""
    if os.path.isdir(os.path.join(path, "episodes")):
        return [path]
    found = (
        sorted(os.path.join(path, d) for d in os.listdir(path) if os.path.isdir(os.path.join(path, d, "episodes")))
        if os.path.isdir(path)
        else []
    )
    if not found:
        raise app.UsageError(f"--episodes={path}: no episodes/ there or in a sub-directory")
    return found


def main(argv):
    """Print the table of endings of every sealed episode (errored ones included) under ``--episodes``."""
    del argv
    endings = [
        ending(ep.summary, ep.steps)
        for d in collections_under(F.episodes)
        for ep in iter_episodes(d, include_errored=True)
    ]
    print(render(tabulate(endings, F.top)), end="")


if __name__ == "__main__":
    app.run(main)
