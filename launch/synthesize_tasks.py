"""Tasks the site writes itself: explore it, describe each trajectory, derive its check from the final page, keep the
tasks that execution verifies, and write them as a task file (docs/tasks.md, "Tasks the site writes itself").

  # the random explorer from the start pages you name (relative URLs take --tasks_origin)
  python -m launch.synthesize_tasks --start_urls=/index.html,/py-modindex.html --tasks_origin=http://127.0.0.1:8765 \
      --runs=60 --held_out=docs/pydocs_tasks.jsonl --out=data/tasks/pydocs_synth.jsonl
  # or from any collection on the site (the noisy oracle's, a model's: launch.collect) and its task file
  python -m launch.synthesize_tasks --episodes=data/episodes/pydocs --tasks=docs/pydocs_tasks.jsonl \
      --tasks_origin=http://127.0.0.1:8765 --out=data/tasks/pydocs_synth.jsonl
  # instructions written by a model on an OpenAI-compatible endpoint instead of the template
  python -m launch.synthesize_tasks … --describer=http://127.0.0.1:8000 --describer_model=tgpo

Recordings (exploration, replays) go to --work_dir; re-running resumes them. The counts go to
<work_dir>/synthesis.json and stdout.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from launch.entry import prepare

F = flags.FLAGS
flags.DEFINE_list("start_urls", [], "where exploration starts (relative ones take --tasks_origin)")
flags.DEFINE_string("tasks", None, "a task file: its start URLs (without --start_urls), or the tasks of --episodes")
flags.DEFINE_string("tasks_origin", None, "the site's origin (http://host:port) for relative URLs")
flags.DEFINE_string("episodes", None, "describe this collection's episodes instead of exploring (with --tasks)")
flags.DEFINE_integer("runs", 20, "exploration episodes per start URL")
flags.DEFINE_integer("max_steps", 6, "steps per exploration episode")
flags.DEFINE_integer("contexts", 4, "parallel browser contexts")
flags.DEFINE_integer("seed", 0, "exploration seed")
flags.DEFINE_string("family", "synth", "the tasks' family (and id prefix)")
flags.DEFINE_enum("split", "train", ["train", "test"], "the tasks' split")
flags.DEFINE_string(
    "describer",
    "template",
    "'template', or the base URL of an OpenAI-compatible server whose model writes each instruction",
)
flags.DEFINE_string("describer_model", "bundled", "the describer's model name on that server")
flags.DEFINE_string(
    "held_out",
    None,
    "a task file whose held-out (test) tasks no synthesized task may overlap: "
    "none ends on a page their checks accept or types a text their instructions quote",
)
flags.DEFINE_string("work_dir", None, "recordings (default: <out>.work)")
flags.DEFINE_string("out", "data/tasks/synth.jsonl", "the task file to write")


def main(argv):
    """Explore the site (or read recorded episodes), synthesize verified tasks, write them as a task file and print the
    counts."""
    prepare(argv)
    from rollout.envs.taskfile import TaskFileError, load_tasks
    from rollout.synthesis import EndpointDescriber, SynthConfig, synthesize
    from rollout.urls import site_relative

    origin = F.tasks_origin
    try:
        listed = load_tasks(F.tasks, origin) if F.tasks else []
    except TaskFileError as e:
        raise app.UsageError(str(e)) from None
    start_of = {t.task_id: site_relative(t.goal["start_url"], origin or "") for t in listed}  # as the file wrote it
    starts = list(F.start_urls) or list(dict.fromkeys(start_of.values()))
    if F.episodes is None and not starts:
        raise app.UsageError("nothing to explore from: give --start_urls (or a --tasks file), or --episodes")
    if F.episodes is not None and not listed:
        raise app.UsageError("--episodes needs the --tasks file its episodes were collected on (their start URLs)")
    try:
        held_out = load_tasks(F.held_out, origin) if F.held_out else []
    except TaskFileError as e:
        raise app.UsageError(str(e)) from None
    held_out = [t for t in held_out if t.split == "test"]
    describer = None if F.describer == "template" else EndpointDescriber(F.describer, F.describer_model)
    cfg = SynthConfig(
        work_dir=F.work_dir or F.out + ".work",
        runs=F.runs,
        max_steps=F.max_steps,
        contexts=F.contexts,
        seed=F.seed,
        family=F.family,
        split=F.split,
    )
    os.makedirs(os.path.dirname(os.path.abspath(F.out)), exist_ok=True)
    try:
        counts = synthesize(
            starts,
            origin,
            F.out,
            cfg,
            describer=describer,
            episodes_dir=F.episodes,
            start_of=start_of if F.episodes else None,
            held_out=held_out,
        )
    except TaskFileError as e:  # an unreachable start URL, a bad origin
        raise app.UsageError(str(e)) from None
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    app.run(main)
