"""The ipywidgets face of the quizzes; all scoring and saving stays in ``autograder.learner.quiz``.

Keyboard and screen readers: only native controls are used (radio inputs, ``<button>``s,
``<textarea>``), all reachable with Tab and worked with Space/Enter; every handler listens to
``click`` or a value change, which keyboard use fires too. Every control has a description or a
tooltip that names its question, so "Check" is never read out without saying which one.
"""
import string

import ipywidgets as widgets
from IPython.display import Markdown, display

from autograder.learner import quiz

RATING_TIPS = ("I did not know it", "I struggled to recall it", "I knew it", "It was easy")
_LABEL_STYLE = {"description_width": "initial"}  # the whole description, not cut at 80 px


def _prompt(question, number, review, note):
    out = widgets.Output()
    with out:
        sep = "\n\n" if review else " "  # a review question's origin goes on a line of its own
        display(Markdown(f"{quiz.heading(question, number, review, note)}{sep}{question.prompt}"))
    return out


def _name(number, review):
    return f"R{number}" if review else f"Q{number}"


def _choice_widget(question, number, review="", note=""):
    name = _name(number, review)
    options = [(f"({letter}) {c['text']}", i)
               for i, (letter, c) in enumerate(zip(string.ascii_lowercase, question.choices))]
    picker = widgets.RadioButtons(options=options, value=None, description=f"{name}, your answer:",
                                  tooltip=f"Pick one answer to {name}, then press Check",
                                  style=_LABEL_STYLE, layout=widgets.Layout(width="auto"))
    button = widgets.Button(description="Check", tooltip=f"Check your answer to {name}")
    feedback = widgets.Output()

    def on_check(_):
        feedback.clear_output()
        with feedback:
            if picker.value is None:
                print("Pick an answer first.")
                return
            result = quiz.check_choice(question, picker.value, review=review)
            display(Markdown(("✅ " if result.correct else "❌ ") + result.text))

    button.on_click(on_check)
    return widgets.VBox([_prompt(question, number, review, note), picker, button, feedback])


def _recall_widget(question, number, review="", note=""):
    name = _name(number, review)
    typed = widgets.Textarea(placeholder="Type your answer before you reveal the model answer",
                             description=f"{name}, your answer:", style=_LABEL_STYLE,
                             layout=widgets.Layout(width="90%"))
    reveal = widgets.Button(description="Reveal", tooltip=f"Show the model answer to {name}")
    ratings = widgets.ToggleButtons(options=[(r, i) for i, r in enumerate(quiz.RATINGS)], value=None,
                                    description=f"How well did you recall {name}?", style=_LABEL_STYLE,
                                    tooltip=f"Rate your recall of {name}", tooltips=list(RATING_TIPS))
    shown = widgets.Output()

    def on_reveal(_):
        shown.clear_output()
        with shown:
            display(Markdown(f"**Model answer:** {question.answer}\n\nHow well did you recall it?"))
        ratings.layout.display = None

    def on_rate(change):
        if change["new"] is not None:
            quiz.rate_recall(question, typed.value, change["new"], review=review)
            with shown:
                print(f"Saved: {quiz.RATINGS[change['new']]}.")

    ratings.layout.display = "none"
    reveal.on_click(on_reveal)
    ratings.observe(on_rate, names="value")
    return widgets.VBox([_prompt(question, number, review, note), typed, reveal, shown, ratings])


def question_widget(question, number, review="", note=""):
    """One question as widgets; `review`/`note` as in ``quiz.display_questions``."""
    if question.kind == "choice":
        return _choice_widget(question, number, review, note)
    return _recall_widget(question, number, review, note)
