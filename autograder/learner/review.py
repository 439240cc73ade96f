"""Spaced retrieval: each notebook from 02 on opens with the earlier notebooks' questions that are due,
and the review notebook (``notebooks/review.ipynb``) serves every notebook's, after the course too.

Why: a question answered once and never again is soon forgotten; one that comes back just as it is
about to be forgotten is kept, and each successful recall lets it stay away longer. The review reads
your history from the progress file (``autograder.learner.progress_file``) and schedules every quiz
question (course order: the sorted names of ``autograder/learner/quizzes/*.yaml``; every section,
``derive`` included) with FSRS, the Free Spaced Repetition Scheduler (the ``fsrs`` package, its
default parameters, desired retention 0.9, no random fuzz). The rules:

- A *sitting* is one day in one notebook (the question's own notebook, a later one whose review
  showed it, or the review notebook). Each sitting gives a question one grade:
  a question the course judges (number, short answer, choice) by your *first* answer of the sitting
  (a second try after the feedback is reading, not recall): right is "good", wrong is "again";
  a free-recall question by your *last* self-rating of the sitting (so a mis-click can be corrected):
  "again", "hard", "good" or "easy".
- FSRS turns each question's grades, in time order, into the date it is due again. A miss ("again")
  brings it back after 10 minutes (in practice: at the next notebook's review, or the next day's),
  "hard" after 15 minutes; a first "good" after about 2 days and an "easy" after about 8; each later
  success multiplies the interval (2, 11, 46 days ... for steady "good"), a later miss starts it
  short again.
- A notebook's opening review (``show``) draws on the notebooks before it, so the last notebook's
  questions come back only in the review notebook. It shows ``count`` questions (5 by default) and
  says how many are due. First the questions that are due, those you are least likely to recall now
  (FSRS's predicted recall) first, taking turns between notebooks; then questions you have never
  answered, the most recent earlier notebook first, taking turns between notebooks, and within a
  notebook the concept check, then "retrieve", then "derive", then "predict", in quiz order. A
  question that is not due is not shown: reviewing early is effort that spacing would waste.
- The review notebook (``show_due``) draws on every notebook and shows at most ``count`` questions
  (10 by default; answer them and run the cell again for the next ones, or ask for more with a
  larger ``count``): the due ones, most overdue first (the lowest predicted recall, whatever the
  notebook), then questions never answered from the notebooks whose questions you have answered
  (from every notebook while you have answered none), in the default order above.

With no history at all a notebook's review is that default order: the concept checks of the
previous notebooks, the most recent first. Answers given in a review are saved like any quiz answer,
with ``"review": <the notebook that showed it>`` (``"review"`` for the review notebook). Files
written before this schedule existed count too: every attempt with a time and a right/wrong or a
rating is a grade.
"""
import dataclasses
import datetime
from datetime import timedelta

import fsrs
from IPython.display import Markdown, display

from autograder.learner import progress_file, quiz, quiz_schema

SECTION_ORDER = ("concept_check", "retrieve", "derive", "predict")  # "derive" is optional in a quiz file
DEFAULT_COUNT = 5
REVIEW_NOTEBOOK = "review"  # notebooks/review.ipynb: its answers are saved with "review": "review"
SESSION_COUNT = 10  # questions the review notebook shows at a time
STEPS = (timedelta(minutes=10),)  # learning and relearning steps: a miss comes back after 10 minutes
SCHEDULER = fsrs.Scheduler(learning_steps=STEPS, relearning_steps=STEPS, enable_fuzzing=False)
GRADES = {"again": fsrs.Rating.Again, "hard": fsrs.Rating.Hard, "good": fsrs.Rating.Good,
          "easy": fsrs.Rating.Easy, "right": fsrs.Rating.Good, "wrong": fsrs.Rating.Again}


def course_notebooks() -> list:
    """The notebooks that have quizzes, in course order."""
    return quiz_schema.course_notebooks()


def earlier_notebooks(notebook: str) -> list:
    """The notebooks before `notebook` in course order (a clear error for an unknown name)."""
    names = course_notebooks()
    if notebook not in names:
        raise ValueError(f"no quiz for a notebook named {notebook!r}; the course's notebooks are: {', '.join(names)}")
    return names[:names.index(notebook)]


def parse_time(stamp):
    """An attempt's time stamp as an aware UTC datetime (a stamp without offset is local time), or None."""
    try:
        moment = datetime.datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    return moment.astimezone(datetime.UTC)


# --- sittings: what the history says ------------------------------------------------------------------
def _judged(attempt) -> bool:
    return isinstance(attempt.get("correct"), bool)


def _rated(attempt) -> bool:
    rating = attempt.get("rating")
    return isinstance(rating, int) and not isinstance(rating, bool) and 0 <= rating < len(quiz_schema.RATINGS)


def _usable(attempt) -> bool:
    """An attempt the schedule can read (a hand-edited file may hold anything else)."""
    return isinstance(attempt, dict) and isinstance(attempt.get("notebook"), str) \
        and isinstance(attempt.get("question"), str) and (_judged(attempt) or _rated(attempt))


@dataclasses.dataclass
class Sitting:
    """The attempts at one question in one sitting (one day, one notebook), in file order."""
    notebook: str
    question: str
    day: str
    where: str
    attempts: list

    @property
    def deciding(self) -> dict:
        """The attempt that grades the sitting: the last self-rating, else the first judged answer."""
        rated = [a for a in self.attempts if _rated(a)]
        return rated[-1] if rated else self.attempts[0]

    @property
    def outcome(self) -> str:
        """"right"/"wrong" (a judged answer) or the name of the self-rating."""
        attempt = self.deciding
        if _rated(attempt):
            return quiz_schema.RATINGS[attempt["rating"]]
        return "right" if attempt["correct"] else "wrong"

    @property
    def right(self) -> bool:
        return self.outcome in ("right", "good", "easy")

    @property
    def time(self):
        return parse_time(self.deciding.get("time"))


def sittings(attempts) -> list:
    """The attempts grouped into sittings, in the order each sitting began."""
    grouped = {}
    for attempt in attempts:
        if not _usable(attempt):
            continue
        day = str(attempt.get("time", ""))[:10]
        where = attempt.get("review") or attempt["notebook"]
        key = (attempt["notebook"], attempt["question"], day, where)
        grouped.setdefault(key, Sitting(*key, [])).attempts.append(attempt)
    return list(grouped.values())


# --- cards: where each question stands ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Card:
    """Where one question stands in the schedule; `memory` is FSRS's card (None: never answered)."""
    question: quiz_schema.Question
    memory: fsrs.Card = None
    grades: int = 0
    last_outcome: str = ""
    last_time: datetime.datetime = None

    @property
    def seen(self) -> bool:
        return self.memory is not None

    @property
    def due(self):
        return self.memory.due if self.seen else None

    def is_due(self, now) -> bool:
        return self.seen and self.memory.due <= now

    def recall_chance(self, now) -> float:
        """FSRS's predicted chance that you recall it now (elapsed time counted in fractions of a day)."""
        if not self.seen:
            return 0.0
        decay = -SCHEDULER.parameters[20]
        factor = 0.9 ** (1 / decay) - 1
        elapsed = max(0.0, (now - self.memory.last_review).total_seconds() / 86400)
        return (1 + factor * elapsed / self.memory.stability) ** decay

    @property
    def note(self) -> str:
        """Why it is shown, in a few words."""
        if not self.seen:
            return "not answered yet"
        when = self.last_time.astimezone().strftime("%Y-%m-%d")
        if self.last_outcome in ("wrong", "again"):
            return f"you missed it last time ({when})" if self.last_outcome == "wrong" \
                else f"you rated it 'again' last time ({when})"
        if self.last_outcome == "hard":
            return f"you rated it 'hard' last time ({when})"
        return f"answered right on {when}; due again now"


def default_order(notebooks) -> list:
    """Every question of `notebooks`, in the order for a learner with no history: the latest notebook
    first, taking turns; a section SECTION_ORDER does not name comes last (no question is ever left out)."""
    queues = []
    for name in reversed(list(notebooks)):
        sections = quiz_schema.load_quiz(name)
        order = [s for s in SECTION_ORDER if s in sections] + [s for s in sections if s not in SECTION_ORDER]
        queues.append([q for s in order for q in sections[s][1]])
    return _take_turns(queues)


def _take_turns(queues) -> list:
    order = []
    for turn in range(max((len(q) for q in queues), default=0)):
        order += [queue[turn] for queue in queues if turn < len(queue)]
    return order


def cards(notebooks, attempts=None) -> list:
    """A Card for every question of `notebooks`, in the default order, from `attempts`
    (the progress file's, if not given)."""
    attempts = progress_file.load()["attempts"] if attempts is None else attempts
    history = {}
    for sitting in sittings(attempts):
        if sitting.time is not None:  # a grade needs a moment in time
            history.setdefault((sitting.notebook, sitting.question), []).append(sitting)
    result = []
    for question in default_order(notebooks):
        seen = sorted(history.get((question.notebook, question.id), []), key=lambda s: s.time)
        if not seen:
            result.append(Card(question))
            continue
        memory = fsrs.Card(card_id=0, due=seen[0].time)
        for sitting in seen:
            memory, _log = SCHEDULER.review_card(memory, GRADES[sitting.outcome], review_datetime=sitting.time)
        result.append(Card(question, memory, len(seen), seen[-1].outcome, seen[-1].time))
    return result


def _now(now):
    return datetime.datetime.now(datetime.UTC) if now is None else now.astimezone(datetime.UTC)


def rank_due(all_cards, now) -> list:
    """The cards that are due at `now`, least likely recalled first, taking turns between notebooks."""
    due = sorted((c for c in all_cards if c.is_due(now)), key=lambda c: c.recall_chance(now))
    by_notebook = {}
    for card in due:
        by_notebook.setdefault(card.question.notebook, []).append(card)
    return _take_turns(list(by_notebook.values()))


def _check_count(count) -> None:
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"count is how many questions to review: a whole number from 1, got {count!r}")


def local_time(moment) -> str:
    """A due date as the learner reads it: local time, to the minute (a miss comes back in minutes)."""
    return moment.astimezone().strftime("%Y-%m-%d %H:%M")


def schedule(notebook: str, count: int = DEFAULT_COUNT, attempts=None, now=None) -> list:
    """The `count` cards the review at the top of `notebook` shows, in order: due ones, then new ones."""
    _check_count(count)
    everything = cards(earlier_notebooks(notebook), attempts)
    return (rank_due(everything, _now(now)) + [c for c in everything if not c.seen])[:count]


def _new_in_worked(everything) -> list:
    """The never-answered cards of the notebooks with an answered question (of all, if none has one)."""
    worked = {c.question.notebook for c in everything if c.seen}
    return [c for c in everything if not c.seen and (not worked or c.question.notebook in worked)]


def _session(everything, count, now) -> list:
    due = sorted((c for c in everything if c.is_due(now)), key=lambda c: c.recall_chance(now))
    return (due + _new_in_worked(everything))[:count]


def session(count: int = SESSION_COUNT, attempts=None, now=None) -> list:
    """The `count` cards the review notebook shows: every notebook's due ones, most overdue (least
    likely recalled) first, then never-answered ones of the notebooks you have worked in."""
    _check_count(count)
    return _session(cards(course_notebooks(), attempts), count, _now(now))


def _summary(everything, new, now, where) -> str:
    due = [c for c in everything if c.is_due(now)]
    waiting = sorted(c.due for c in everything if c.seen and not c.is_due(now))
    text = (f"**{len(due)} question{'s' * (len(due) != 1)} due** {where} "
            f"(answered before, and their interval has passed); {len(new)} never answered.")
    if waiting:
        text += f" The next one not yet due comes back on {local_time(waiting[0])}."
    return text


def summary(notebook: str, attempts=None, now=None) -> str:
    """One paragraph: how many questions are due, how many were never answered, when the next comes."""
    everything = cards(earlier_notebooks(notebook), attempts)
    return _summary(everything, [c for c in everything if not c.seen], _now(now), "from earlier notebooks")


def show(notebook: str, count: int = DEFAULT_COUNT) -> None:
    """Display the opening review of `notebook`: widgets, or plain text with COURSE_PLAIN_QUIZ=1."""
    if not earlier_notebooks(notebook):
        print(f"No review in {notebook}: it is the first notebook. "
              "The questions you answer here come back at the start of the later ones.")
        return
    attempts, now = progress_file.load()["attempts"], _now(None)
    shown = schedule(notebook, count, attempts, now)
    heading = f"### Review: {len(shown)} question{'s' * (len(shown) != 1)} from earlier notebooks\n\n"
    rules = ("Due questions come first, those you are least likely to recall first; then questions you "
             "have not answered yet. A miss brings a question back soon, each success sends it away for "
             "longer (the rules are in `autograder/learner/review.py`).")
    display(Markdown(heading + summary(notebook, attempts, now) + "\n\n" + rules))
    if not shown:
        print("Nothing is due now: come back to this review later.")
        return
    quiz.display_questions([c.question for c in shown], review=notebook, notes=[c.note for c in shown])


def show_due(count: int = SESSION_COUNT) -> None:
    """Display the review notebook's session: up to `count` questions of every notebook, due ones first."""
    _check_count(count)
    attempts, now = progress_file.load()["attempts"], _now(None)
    everything = cards(course_notebooks(), attempts)
    new = _new_in_worked(everything)
    waiting = sum(c.is_due(now) for c in everything) + len(new)
    shown = _session(everything, count, now)
    heading = f"### Review: {len(shown)} question{'s' * (len(shown) != 1)} from all notebooks\n\n"
    more = ""
    if waiting > len(shown):
        more = (f"\n\n{waiting - len(shown)} more wait: answer these and run this cell again for the next "
                f"ones, or show them all now with `review.show_due(count={waiting})`.")
    rules = ("Due questions come first, the most overdue (least likely recalled) first, whatever their "
             "notebook; then questions you have not answered yet. A miss brings a question back in ten "
             "minutes, each success sends it away for longer (the rules are in `autograder/learner/review.py`).")
    display(Markdown(heading + _summary(everything, new, now, "from all notebooks") + more + "\n\n" + rules))
    if not shown:
        print("Nothing is due now: the progress view below says when the next questions come back.")
        return
    quiz.display_questions([c.question for c in shown], review=REVIEW_NOTEBOOK, notes=[c.note for c in shown])
