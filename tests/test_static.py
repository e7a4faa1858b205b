"""Every Python file of the project compiles and names nothing undefined (pyflakes' undefined-name checks): a name
left behind by a refactor (a flag object renamed in one place) otherwise fails only when that line first runs,
which for a benchmark's or a launcher's rarer branch may be in a user's hands."""
import ast
import os

from pyflakes import checker, messages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("tgpo_jax", "rollout", "trees", "experiment", "serving", "launch", "configs", "bench", "scripts", "tests")
UNDEFINED = (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)


def python_files():
    for pkg in PACKAGES:
        for base, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__pycache__"))]
            yield from (os.path.join(base, f) for f in sorted(files) if f.endswith(".py"))
    yield os.path.join(ROOT, "setup.py")


def undefined_names(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        source = f.read()
    tree = ast.parse(source, filename=path)
    found = checker.Checker(tree, filename=path).messages
    return [f"{os.path.relpath(path, ROOT)}:{m.lineno}: {m.message % m.message_args}" for m in found
            if isinstance(m, UNDEFINED)]


def test_the_checker_finds_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def main():\n    return _FLAGS.batch\n")
    assert undefined_names(str(bad)) == [f"{os.path.relpath(str(bad), ROOT)}:2: undefined name '_FLAGS'"]


def test_no_python_file_names_anything_undefined():
    files = list(python_files())
    assert len(files) > 100
    problems = [p for path in files for p in undefined_names(path)]
    assert not problems, "\n".join(problems)
