import os
import pathlib
import tempfile

# Notebooks executed by the tests save quiz progress here, never in the tester's home.
os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(tempfile.mkdtemp()) / "progress.json"))
# Hidden tests load answer keys (autograder/grader/keys.py) from the course directory; notebooks run
# by the tests work in temporary folders outside it.
os.environ.setdefault("COURSE_ROOT", str(pathlib.Path(__file__).resolve().parent.parent))
