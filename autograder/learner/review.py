"""Spaced retrieval: each notebook opens with questions from the earlier ones, missed ones first.

Why: a question answered once and never again is soon forgotten; one that comes back, most
often when it was missed, is kept. The schedule is a Leitner system over the quiz questions of
the earlier notebooks (course order: the sorted names of ``autograder/learner/quizzes/*.yaml``), read
from the progress file (``autograder.learner.progress``), so it depends on nothing else:

- Every question sits in a box from 1 to 5; a question never answered is in box 1.
- A *sitting* is one day in one notebook (the question's own notebook, or the one whose review
  showed it). Each sitting moves a question once:
  a choice question by your *first* answer of the sitting (a second pick after the feedback is
  reading, not recall): right moves it one box up, wrong sends it back to box 1;
  a recall question by your *last* self-rating of the sitting (so a mis-click can be corrected):
  "again" or "hard" sends it back to box 1, "good" moves it one box up, "easy" two.
- A review shows ``count`` questions: the lowest box first; within a box, questions you have
  answered before come first, the longest unseen first; then those never answered, in the
  default order: the most recent earlier notebook first, taking turns between notebooks, and
  within a notebook the concept check, then "retrieve", then "predict", in quiz order.

With no history at all the review is that default: the concept checks of the previous
notebooks, most recent first. Answers given in a review are saved like any quiz answer, with
``"review": <the notebook that showed it>``.
"""
import dataclasses
import importlib.resources

from IPython.display import Markdown, display

from autograder.learner import progress, quiz

BOXES = 5
SECTION_ORDER = ("concept_check", "retrieve", "predict")
DEFAULT_COUNT = 5


def course_notebooks() -> list:
    """The notebooks that have quizzes, in course order."""
    folder = importlib.resources.files("autograder.learner") / "quizzes"
    return sorted(p.name[:-len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


def earlier_notebooks(notebook: str) -> list:
    """The notebooks before `notebook` in course order (a clear error for an unknown name)."""
    names = course_notebooks()
    if notebook not in names:
        raise ValueError(f"no quiz for a notebook named {notebook!r}; the course's notebooks are: {', '.join(names)}")
    return names[:names.index(notebook)]


@dataclasses.dataclass(frozen=True)
class Card:
    """Where one question stands in the schedule."""
    question: quiz.Question
    box: int = 1
    last_seen: int = -1  # position of its latest attempt in the progress file; -1: never answered
    last_outcome: str = ""  # "right", "wrong", or the rating of a recall question
    last_day: str = ""

    @property
    def seen(self) -> bool:
        return self.last_seen >= 0

    @property
    def note(self) -> str:
        """Why it comes back, in a few words."""
        if not self.seen:
            return "not answered yet"
        if self.last_outcome == "wrong":
            return "you missed it last time"
        if self.box == 1:
            return f"you rated it '{self.last_outcome}' last time"
        return f"box {self.box} of {BOXES}, last answered {self.last_day}"


def default_order(notebooks) -> list:
    """Questions of `notebooks` for a learner with no history: the latest notebook first, taking turns."""
    queues = []
    for name in reversed(list(notebooks)):
        sections = quiz.load_quiz(name)
        queues.append([q for s in SECTION_ORDER if s in sections for q in sections[s][1]])
    order = []
    for turn in range(max((len(q) for q in queues), default=0)):
        order += [queue[turn] for queue in queues if turn < len(queue)]
    return order


@dataclasses.dataclass
class Sitting:
    """The attempts at one question in one sitting (one day, one notebook), in file order."""
    notebook: str
    question: str
    kind: str
    day: str
    where: str
    attempts: list
    last_position: int

    @property
    def outcome(self) -> str:
        """What counts: "right"/"wrong" (a choice question's first answer) or the last rating's name."""
        if self.kind == "choice":
            return "right" if self.attempts[0]["correct"] else "wrong"
        return quiz.RATINGS[self.attempts[-1]["rating"]]

    @property
    def right(self) -> bool:
        return self.outcome in ("right", "good", "easy")


def _usable(attempt):
    """An attempt that the schedule can read (a hand-edited file may hold anything else)."""
    if not isinstance(attempt, dict) or not isinstance(attempt.get("notebook"), str) \
            or not isinstance(attempt.get("question"), str):
        return False
    if attempt.get("kind") == "choice":
        return isinstance(attempt.get("correct"), bool)
    rating = attempt.get("rating")
    return attempt.get("kind") == "recall" and isinstance(rating, int) and not isinstance(rating, bool) \
        and 0 <= rating < len(quiz.RATINGS)


def sittings(attempts) -> list:
    """The attempts grouped into sittings, in the order each sitting began."""
    grouped = {}
    for position, attempt in enumerate(attempts):
        if not _usable(attempt):
            continue
        day = str(attempt.get("time", ""))[:10]
        where = attempt.get("review") or attempt["notebook"]
        key = (attempt["notebook"], attempt["question"], attempt["kind"], day, where)
        sitting = grouped.setdefault(key, Sitting(*key, [], position))
        sitting.attempts.append(attempt)
        sitting.last_position = position
    return list(grouped.values())


def _moved(box, sitting):
    """The box after one sitting; see the module doc."""
    outcome = sitting.outcome
    if outcome in ("wrong", "again", "hard"):
        return 1
    return min(box + (2 if outcome == "easy" else 1), BOXES)


def cards(notebooks, attempts=None) -> list:
    """A Card for every question of `notebooks`, in the default order, from `attempts`
    (the progress file's, if not given)."""
    questions = default_order(notebooks)
    attempts = progress.load()["attempts"] if attempts is None else attempts
    history = {}
    for sitting in sittings(attempts):
        history.setdefault((sitting.notebook, sitting.question, sitting.kind), []).append(sitting)
    result = []
    for question in questions:
        box, seen = 1, history.get((question.notebook, question.id, question.kind), [])
        for sitting in seen:
            box = _moved(box, sitting)
        latest = max(seen, key=lambda s: s.last_position) if seen else None
        result.append(Card(question, box, latest.last_position, seen[-1].outcome, latest.day) if seen
                      else Card(question))
    return result


def schedule(notebook: str, count: int = DEFAULT_COUNT, attempts=None) -> list:
    """The `count` questions the review at the top of `notebook` shows, in order."""
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"count is how many questions to review: a whole number from 1, got {count!r}")
    ranked = cards(earlier_notebooks(notebook), attempts)
    default_rank = {id(card): rank for rank, card in enumerate(ranked)}
    ranked.sort(key=lambda c: (c.box, not c.seen, c.last_seen if c.seen else default_rank[id(c)]))
    return ranked[:count]


def show(notebook: str, count: int = DEFAULT_COUNT) -> None:
    """Display the opening review of `notebook`: widgets, or plain text with COURSE_PLAIN_QUIZ=1."""
    if not earlier_notebooks(notebook):
        print(f"No review in {notebook}: it is the first notebook. "
              "The questions you answer here come back at the start of the later ones.")
        return
    due = schedule(notebook, count)
    display(Markdown(
        f"### Review: {len(due)} questions from earlier notebooks\n\n"
        "Questions you missed come back first. A right answer moves a question up a box (of "
        f"{BOXES}) and a miss sends it back to box 1; the lower its box, the sooner it returns. "
        "Your answers are saved like any quiz answer."))
    quiz.display_questions([c.question for c in due], review=notebook, notes=[c.note for c in due])
