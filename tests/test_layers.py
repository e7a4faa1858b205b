"""The folders are the layers, and data flows one way: each package imports only the layers below it.

tgpo_jax (the JAX library) < rollout (collection) < trees (dataset building) < experiment (pipeline, evaluation,
report); serving sits on rollout and tgpo_jax. recipes (what only one model needs: its initialisation, its freeze,
its thought wording) sits on tgpo_jax, rollout and trees, which never import it (the library and rollout look a
recipe's pieces up by the names it registers). launch/ (entry points), configs/, bench/ and tests/ may import any."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = {"tgpo_jax", "rollout", "trees", "recipes", "experiment", "serving", "launch", "configs", "bench"}
ALLOWED = {
    "tgpo_jax": {"tgpo_jax"},
    "rollout": {"tgpo_jax", "rollout"},
    "trees": {"tgpo_jax", "rollout", "trees"},
    "serving": {"tgpo_jax", "rollout", "serving"},
    "recipes": {"tgpo_jax", "rollout", "trees", "recipes"},
    "experiment": {"tgpo_jax", "rollout", "trees", "serving", "recipes", "experiment", "configs"},
}


def imported_packages(path: str) -> set[str]:
    """Top-level project packages a module imports, anywhere in it (function-level imports count)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & PROJECT


def test_each_layer_imports_only_the_layers_below():
    bad, seen = [], 0
    for pkg, allowed in ALLOWED.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, pkg)):
            for fn in files:
                if fn.endswith(".py"):
                    path = os.path.join(dirpath, fn)
                    seen += 1
                    extra = imported_packages(path) - allowed
                    if extra:
                        bad.append(f"{os.path.relpath(path, ROOT)} imports {sorted(extra)}")
    assert seen > 50 and not bad, "\n".join(bad)


def test_the_checker_sees_function_level_imports(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import os\ndef f():\n    from experiment.pipeline import run\n    import trees.build\n")
    assert imported_packages(str(p)) == {"experiment", "trees"}
