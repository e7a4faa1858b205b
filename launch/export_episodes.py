"""Export a collection's episodes as trajectories a BrowserGym / AgentLab user reads (schema: docs/trajectories.md).

  python -m launch.export_episodes --episodes=data/episodes/train --out=exports/train.jsonl
  python -m launch.export_episodes --episodes=data/episodes/train --out=exports/train.jsonl --noinclude_observation
One JSONL file: a header line, then each episode's line followed by its step lines. Screenshots are not copied:
the file names them by paths relative to its own directory. The file appears only once the export is complete and
has passed the format's reader; each episode's steps are checked against their seal first.
"""

from __future__ import annotations

import json
import logging
import os

from absl import app, flags

from launch.entry import prepare

F = flags.FLAGS
flags.DEFINE_string("episodes", None, "collection directory (launch.collect --out)")
flags.DEFINE_string("out", None, "the trajectories file to write (.jsonl)")
flags.DEFINE_bool(
    "include_observation",
    True,
    "write each step's accessibility text (obs.axtree_txt); without it the file is far smaller and axtree_txt is null",
)
flags.DEFINE_bool("include_errored", False, "also export errored episodes (browser crash, watchdog)")
flags.DEFINE_integer(
    "scroll_px", None, "pixels of BrowserGym's scroll(0, ±N) for SCROLL (default: 0.8 x the harness's 768 px viewport)"
)
flags.DEFINE_bool("progress", True, "show a progress bar on stderr")


def _count_episodes(episodes_dir: str) -> int:
    """Episode directories (a progress bar's total; unfinished or errored ones included, so it may end short)."""
    root = os.path.join(episodes_dir, "episodes")
    if not os.path.isdir(root):
        return 0
    return sum(len(os.listdir(os.path.join(root, t))) for t in os.listdir(root))


def main(argv):
    """Export the episodes directory as a trajectory JSONL file and print what was written as JSON."""
    prepare(argv)
    from rollout.recording import RecordingError
    from rollout.trajectory_export import SCROLL_PX, export_collection

    if not F.episodes or not F.out:
        raise app.UsageError("--episodes and --out are required")
    if F.scroll_px is not None and F.scroll_px <= 0:
        raise app.UsageError(f"--scroll_px must be positive, got {F.scroll_px}")
    bar = None
    if F.progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=_count_episodes(F.episodes), desc="export", unit="ep")
    try:
        result = export_collection(
            F.episodes,
            F.out,
            include_observation=F.include_observation,
            include_errored=F.include_errored,
            scroll_px=F.scroll_px or SCROLL_PX,
            progress=None if bar is None else (lambda ep: bar.update(1)),
        )
    except RecordingError as e:
        raise app.UsageError(f"{e}; nothing was written") from None
    finally:
        if bar is not None:
            bar.close()
    if not result["episodes"]:
        logging.warning("no finished episodes in %s: %s holds only the header", F.episodes, F.out)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    app.run(main)
