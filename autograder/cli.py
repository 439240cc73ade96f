"""Instructor command line: `backprop-course release [--check] [NOTEBOOK ...]`.

`release` regenerates the student notebooks in notebooks/ from the nbgrader source in
solutions/ (solutions replaced by stubs, hidden tests removed, outputs cleared). It works in a
temporary course directory, so the instructor's own gradebook and folders are never touched.
"""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile


def assignments(root: pathlib.Path) -> list:
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def nbgrader_env() -> dict:
    """nbgrader runs `alembic` from PATH: make this environment's scripts findable."""
    scripts = os.path.dirname(sys.executable)
    return {**os.environ, "PATH": scripts + os.pathsep + os.environ.get("PATH", "")}


def generate(root: pathlib.Path, names: list, out: pathlib.Path) -> list:
    """Run nbgrader generate_assignment for `names`; return the released notebooks' paths."""
    shutil.copy(root / "nbgrader_config.py", out)
    for name in names:
        shutil.copytree(root / "solutions" / name, out / "solutions" / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        result = subprocess.run(
            [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", "--log-level=ERROR"],
            cwd=out, capture_output=True, text=True, env=nbgrader_env())
        if result.returncode != 0:
            raise SystemExit(f"nbgrader could not generate {name}:\n{result.stdout}{result.stderr}")
    return sorted((out / "release").glob("*/*.ipynb"))


def stale_notebooks(root: pathlib.Path, released: list) -> list:
    """Names of notebooks/ files that differ from a fresh release (or are missing)."""
    stale = []
    for path in released:
        shipped = root / "notebooks" / path.name
        if not shipped.exists() or json.loads(shipped.read_text()) != json.loads(path.read_text()):
            stale.append(path.name)
    return stale


def release(root: pathlib.Path, names: list, check: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        released = generate(root, names or assignments(root), pathlib.Path(tmp))
        if check:
            stale = stale_notebooks(root, released)
            for name in stale:
                print(f"notebooks/{name} is stale: run `make release` to regenerate it from solutions/")
            return 1 if stale else 0
        (root / "notebooks").mkdir(exist_ok=True)
        for path in released:
            shutil.copy(path, root / "notebooks" / path.name)
            print(f"wrote notebooks/{path.name}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="backprop-course", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rel = commands.add_parser("release", help="regenerate notebooks/ from solutions/")
    rel.add_argument("notebooks", nargs="*", help="assignment names (default: all)")
    rel.add_argument("--check", action="store_true", help="only report stale notebooks (exit 1 if any)")
    rel.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd(), help="the course repository")
    args = parser.parse_args(argv)
    return release(args.root.resolve(), args.notebooks, args.check)


if __name__ == "__main__":
    sys.exit(main())
