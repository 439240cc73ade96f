import os
import pathlib
import tempfile

# Notebooks executed by the tests save quiz progress here, never in the tester's home.
os.environ.setdefault("COURSE_PROGRESS", str(pathlib.Path(tempfile.mkdtemp()) / "progress.json"))
# Hidden tests load answer keys (solutions/<notebook>/answer_key.py) from the course directory: notebooks
# the tests execute in temporary folders find it here.
os.environ.setdefault("COURSE_ROOT", str(pathlib.Path(__file__).resolve().parent.parent))
