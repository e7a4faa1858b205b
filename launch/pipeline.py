"""The main job: shop → episodes → tree dataset → SFT → DPO / KTO / KTO-Tree / TGPO → browser evaluation → report →
export of the best model. Every stage is resumable: re-running the same command skips finished stages and resumes
the interrupted one.

  python -m launch.pipeline                                   # the embedded default (CPU, 30-60 min on 2 cores)
  python -m launch.pipeline --config=configs/pipeline.py:tiny --config.out=runs/tiny      # CI-sized
  python -m launch.pipeline --config=configs/pipeline.py:large --config.out=runs/large    # the learning result
  python -m launch.pipeline --config.rounds.count=2            # Agent Q rounds: round 2 collects with round 1's TGPO
  python -m launch.pipeline --config.tgpo.loss.beta=0.2 --redo=tgpo   # change a stage, re-run it and what follows
  python -m launch.pipeline --list                             # the stages and their state
A finished stage whose configuration changed is refused (the message names the changed keys) until --redo names it.
Adding a model to --config.eval.models (or a method) runs only what is new; the report and export follow by themselves.
"""

from __future__ import annotations

import json
import sys

from absl import app, flags
from ml_collections import config_flags

from launch.entry import prepare

_CONFIG = config_flags.DEFINE_config_file("config", "configs/pipeline.py", "pipeline config (path[:preset])")
flags.DEFINE_list(
    "redo",
    [],
    "stages to run again (their outputs are deleted), with every stage after them up to "
    "--until; a run killed midway re-runs the rest when started again without --redo",
)
flags.DEFINE_string("until", None, "stop after this stage (e.g. sft)")
flags.DEFINE_bool("list", False, "print the stages and their state, run nothing")
flags.DEFINE_bool("progress", True, "progress bars")
flags.DEFINE_bool("verbose", False, "library INFO logs (Orbax, the harness); off: stage lines, bars and warnings")
F = flags.FLAGS


def main(argv):
    """Run the main job with the given config (or list its stages' state with ``--list``); exit 2 on a stale or damaged
    stage."""
    prepare(argv)
    if not F.verbose:
        import logging

        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.WARNING)
        logging.getLogger().setLevel(logging.WARNING)
    from experiment.pipeline import Pipeline
    from experiment.stages import DamagedInput, StaleStage

    try:
        pipe = Pipeline(_CONFIG.value, progress=F.progress)
        if F.list:
            for row in pipe.runner(F.redo).status():
                secs = f"{row['seconds']:.0f} s" if row["seconds"] is not None else ""
                print(f"{row['stage']:<16} {row['state']:<8} {secs:>7}  {row['describe']}")
            return
        results = pipe.run(F.redo, F.until)
        if F.until:
            print(json.dumps({"out": pipe.out, "stopped_after": F.until, "stages": len(results)}))
            return
    except (StaleStage, DamagedInput, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(
        json.dumps(
            {
                "out": pipe.out,
                "report": results["report"].get("markdown"),
                "export": results["export"],
                "stages": len(results),
            },
            indent=1,
            default=str,
        )
    )


if __name__ == "__main__":
    app.run(main)
