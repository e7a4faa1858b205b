"""What a finished pipeline run gives its user: the evaluations read back, the best model, Table 1's groups, the
report with its results ledger (``experiment.ledger``) and the export (stage bodies of
``experiment.pipeline.Pipeline``, which passes itself as ``p``)."""

from __future__ import annotations

import json
import os

from experiment import agent_q, judge_dpo
from experiment.names import DISPLAY, display_name, method_label, model_name, parse_name
from experiment.pipeline_config import shop_kwargs
from tgpo_jax.data.collate import METHODS
from tgpo_jax.files import write_text_atomic


def eval_results(p) -> dict[str, dict]:
    """Model name -> its ``eval.json`` for every evaluated model; ``ValueError`` naming a file that is not JSON."""
    out = {}
    for name in p.evaluated():
        path = p.path("eval", name, "eval.json")
        try:
            with open(path) as f:
                out[name] = json.load(f)
        except ValueError as e:  # the message names the file: the stage runner adds which stage rewrites it
            raise ValueError(f"{path} is not JSON ({e})") from None
    return out


def best(p, evals: dict[str, dict] | None = None) -> str:
    """The trained model to export: best on ``export.select`` (success: highest; steps: lowest), ties broken
    by success, then fewer steps, then fewer redundant steps. ``evals``: ``eval_results`` already read."""
    sel = p.cfg.export.select
    sign = 1 if sel == "success_rate" else -1
    candidates = [(n, ev["mean"]) for n, ev in (evals or eval_results(p)).items() if n != "base"]
    if not candidates:
        raise RuntimeError("no trained model was evaluated (eval.models has only 'base'): nothing to export")
    return max(
        candidates,
        key=lambda nm: (
            sign * (nm[1][sel] or 0),
            nm[1]["success_rate"] or 0,
            -(nm[1]["avg_steps"] or 0),
            -(nm[1]["redundant_steps"] or 0),
        ),
    )[0]


def groups(p, evals: dict[str, dict] | None = None) -> dict[str, dict[int, dict]]:
    """Table 1 rows: method label -> {training seed: evaluation} ("base" is the first seed's base)."""
    out: dict[str, dict[int, dict]] = {}
    for name, ev in (evals or eval_results(p)).items():
        seed = parse_name(name)[2]
        out.setdefault(method_label(name), {})[p.seeds[0] if seed is None else seed] = ev
    return out


def methods_note(methods, sft_continue: bool = False) -> str:
    """The report's line on the trained methods, naming the paper's methods left out (a control or a baseline
    beside them leaves none out), and SFT's two phases where ``sft_continue`` trains them."""
    missing = [DISPLAY[m] for m in METHODS if m not in methods]
    return (
        f"Trained methods: {', '.join(DISPLAY[m] for m in methods)}"
        + (f" (this preset trains fewer than the full table; not trained: {', '.join(missing)})" if missing else "")
        + "."
        + (
            " SFT is trained in two phases: as configured, then on from that model with SFT (continued)'s recipe "
            "(sft_continue); the preference methods start from the second phase's model."
            if sft_continue
            else ""
        )
    )


def report(p) -> dict:
    """The report stage: Table 1 and 2, the comparisons and claims, learning curves, tree pages and episode viewers."""
    from experiment import results
    from rollout.recording import iter_episodes, read_tasks
    from experiment.report import write_report
    from trees.build import build_task_graph
    from trees.episode_view import write_task_pages
    from tgpo_jax.data.io import read_manifest
    from tgpo_jax.training.metrics import read_metrics

    out = p.path("report")
    evals = eval_results(p)  # read once: groups, the curves and the best model use them
    groups_ = groups(p, evals)
    first = p.tag(p.seeds[0])
    curves, runs_by_method, clips = {}, {}, {}  # the first seed's curves; every seed's rows for the gradient norms
    for n, m, _, s in p.trained():
        rows = read_metrics(p.path("runs", n))
        if p.tag(s) == first:
            curves[display_name(n)] = rows
        runs_by_method.setdefault(method_label(n), []).append(rows)
        clips[method_label(n)] = float(p.cfg[m].optim.clip_norm)
    grads = {k: g for k, v in runs_by_method.items() if (g := results.grad_norms(v, clips[k])) is not None}
    learning, points = {}, {}
    for name in p.curve_models():
        with open(p.path("stages", f"curve-{name}.json")) as f:
            points[name] = results.curve_points(json.load(f)["result"], evals[name])
    sft = model_name("sft", 1, first)
    for name, pts in points.items():
        if parse_name(name)[0] != "sft" and points.get(sft):
            pts = results.continued_curve(points[sft][-1], pts)  # a preference method goes on from SFT's end
        learning[method_label(name)] = pts
    dataset = dict(read_manifest(p.dataset(1)).extra or {})
    trees = {}
    if p.cfg.trees:
        by_task: dict[str, list] = {}
        for ep in iter_episodes(p.episodes(1)):
            by_task.setdefault(ep.task_id, []).append(ep)
        tasks = {t.task_id: t for t in read_tasks(p.episodes(1))}
        tcfg = p.tree_config()
        for tid in sorted(by_task, key=lambda t: (-len(by_task[t]), t))[: p.cfg.trees]:  # K-run trees first
            rel = os.path.join("trees", f"{tid}.html")
            task = tasks.get(tid)
            write_task_pages(
                build_task_graph(by_task[tid], task, tcfg),
                by_task[tid],
                task,
                os.path.join(out, rel),
                title=f"Task {tid}",
            )
            trees[tid] = rel
    trained = [n for n in p.evaluated() if n != "base"]
    best_ = best(p, evals) if trained else None
    e = p.cfg.eval
    decoding = "greedy decoding" if e.temperature == 0 else f"sampling at temperature {e.temperature}"
    notes = [
        f"Exported model: {display_name(best_)} (best {p.cfg.export.select} among the trained models)."
        if best_
        else "No trained model was evaluated: nothing to export.",
        f"Training seeds: {list(p.seeds)} (seed = initialisation and data order); evaluation: "
        f"{decoding}, evaluation seeds {list(e.seeds)}, {e.runs} run(s) per task.",
        methods_note(p.cfg.methods, p.cfg.sft_continue),
        f"Configuration: {p.path('pipeline_config.json')}; stage timings: {p.path('stages')}.",
        f"Rounds: {p.rounds}; behaviour policy of round 1: {p.cfg.collect.policy}.",
    ]
    notes += agent_q.budget_notes(p) + judge_dpo.budget_notes(p)
    fams = results.families(groups_)
    comparisons = results.comparisons(groups_)  # the report's and the ledger's: one bootstrap
    paths = write_report(
        out,
        title=p.cfg.title,
        models={k: list(v.values()) for k, v in groups_.items()},
        dataset=dataset,
        curves=curves,
        trees=trees,
        notes="\n".join(notes),
        rows=results.table(groups_),
        family_rows={f: results.table(groups_, f) for f in fams} if len(fams) > 1 else None,
        comparisons=comparisons,
        claims=results.claims(groups_),
        family_comparisons=results.family_comparisons(groups_),
        learning_curves=learning,
        search_rows=agent_q.search_rows(p, evals),
        grad_rows=grads,
    )
    return {"best": best_, **paths, "ledger": write_run_ledger(p, evals, comparisons)}


def write_run_ledger(p, evals: dict[str, dict], comparisons: list) -> str:
    """The run's results ledger (``experiment.ledger``) in ``report/results/``; returns its path."""
    from experiment import ledger

    e = p.cfg.eval
    decoding = {
        "greedy": e.temperature == 0,
        "temperature": float(e.temperature),
        "top_p": float(e.top_p),
        "constrain": bool(e.constrain),
        "eval_seeds": [int(s) for s in e.seeds],
        "runs_per_task": int(e.runs),
    }
    commit = ledger.git_commit()
    entry = ledger.build_ledger(
        ledger.key_groups(evals, p.seeds[0]),
        comparisons,
        command=ledger.command_line(),
        commit=commit,
        dirty=ledger.git_dirty() if commit else None,
        cpu_flags=ledger.cpu_flags(),
        preset=str(p.cfg.get("preset") or "pipeline"),
        seeds=p.seeds,
        decoding=decoding,
        stage_seconds=ledger.finished_stage_seconds(p.runner().status()),
    )
    return ledger.write_ledger(p.path("report", "results"), entry)


def save_policy_file(cfg, model_dir: str) -> None:
    """``policy.json`` next to a model of the run ``cfg``: launch.evaluate / collect then prompt it as it was trained,
    hold its outputs to the rules of the thought wording it trained on (``thoughts``), on the shop it trained on
    (``shop``: the catalogue's locale and seed, and the task wording ``item_names``), and launch.evaluate decodes
    and caps its episodes as this run's evaluation did (``evaluation``)."""
    from rollout.policies.prompt import POLICY_FILE, POLICY_FORMAT

    saved = {
        "format": POLICY_FORMAT,
        "prompt_style": cfg.prompt_style,
        "budget_tokens": cfg.prompt_tokens,
        "thought_chars": cfg.history_thoughts,
        "page_ids": cfg.page_ids,
        "history_last": cfg.history_last,
        "keep_recent": cfg.keep_recent,
        "page_cut": cfg.page_cut,
        "thoughts": cfg.thoughts,
    }
    if cfg.env.name == "shop":
        saved["shop"] = shop_kwargs(cfg)
    e = cfg.eval  # how the report's held-out numbers were decoded: launch.evaluate's defaults for this model
    saved["evaluation"] = {
        "constrain": bool(e.constrain),
        "max_tokens": int(e.max_tokens),
        "max_steps": int(e.max_steps),
        "step_slack": int(e.step_slack),
    }
    write_text_atomic(os.path.join(model_dir, POLICY_FILE), json.dumps(saved))


def export(p) -> dict:
    """The export stage: the best trained model (``best``) as a Hugging Face directory."""
    from tgpo_jax.training.restore import export_run

    evals = eval_results(p)
    name = best(p, evals)
    out_dir, line = export_run(p.path("runs", name), p.path("export"), dtype=p.cfg.export.dtype or None)
    save_policy_file(p.cfg, out_dir)
    write_text_atomic(
        os.path.join(out_dir, "tgpo_pipeline.json"),
        json.dumps(
            {
                "model": name,
                "method": parse_name(name)[0],
                "eval": evals[name]["mean"],
                "run_dir": p.path("runs", name),
            },
            indent=1,
        ),
    )
    return {"best": name, "dir": out_dir, "summary": line}
