"""The ipywidgets face of the quizzes; all judging and saving stays in ``autograder.learner.quiz_answers``.

Keyboard and screen readers: only native controls are used (radio inputs, text inputs, ``<button>``s,
``<textarea>``), all reachable with Tab and worked with Space/Enter; every handler listens to
``click`` or a value change, which keyboard use fires too. Every control has a description or a
tooltip that names its question (Q7, or R2 in a review), so "Check" is never read out without saying
which one. The one control that starts disabled, a recall question's Reveal, says in its tooltip what
enables it. No control shows a question's id, nor sends an option's id to the browser (an id such as
``tanh-saves-output`` would give the answer away): a choice's options travel as their labels.
"""
import ipywidgets as widgets
from IPython.display import Markdown, display

from autograder.learner import quiz_answers
from autograder.learner.quiz_schema import RATINGS

RATING_TIPS = ("I did not know it", "I struggled to recall it", "I knew it", "It was easy")
_LABEL_STYLE = {"description_width": "initial"}  # the whole description, not cut at 80 px
_TYPED_HINTS = {"numeric": "a number or an expression such as 2**-24, 3*4*8 or sqrt(4/3)",
                "short": "a short answer: a name, a shape, a value, an error"}


def _prompt(question, number, review, note):
    out = widgets.Output()
    with out:
        sep = "\n\n" if review or question.code else " "  # a review's origin or a code block: own line
        display(Markdown(f"{quiz_answers.heading(question, number, review, note)}{sep}"
                         f"{quiz_answers.body_markdown(question)}"))
    return out


def _name(number, review):
    return f"R{number}" if review else f"Q{number}"


def _show_feedback(result):
    display(Markdown(("✅ " if result.correct else "❌ ") + result.text))


def _choice_widget(question, number, review="", note=""):
    name = _name(number, review)
    options = [(f"({letter}) {c.text}", c.id)
               for letter, c in zip(quiz_answers.LETTERS, quiz_answers.shown_choices(question))]
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
            _show_feedback(quiz_answers.check_choice(question, picker.value, review=review))

    button.on_click(on_check)
    return widgets.VBox([_prompt(question, number, review, note), picker, button, feedback])


def _typed_widget(question, number, review="", note=""):
    """A numeric or short question: a one-line text box and Check."""
    name = _name(number, review)
    unit = f" (in {question.unit})" if question.unit else ""
    hint = (f"a Python expression in {quiz_answers.code_names(question)}" if question.variables
            else _TYPED_HINTS[question.kind] + unit)
    typed = widgets.Text(placeholder=hint, description=f"{name}, your answer:",
                         tooltip=f"Type your answer to {name}, then press Check", style=_LABEL_STYLE,
                         layout=widgets.Layout(width="70%"))
    button = widgets.Button(description="Check", tooltip=f"Check your answer to {name}")
    feedback = widgets.Output()

    def on_check(_):
        feedback.clear_output()
        with feedback:
            try:
                result = quiz_answers.check_typed(question, typed.value, review=review)
            except quiz_answers.AnswerError as err:
                print(f"{err}.")
                return
            _show_feedback(result)

    button.on_click(on_check)
    return widgets.VBox([_prompt(question, number, review, note), typed, button, feedback])


def _recall_widget(question, number, review="", note=""):
    name = _name(number, review)
    typed = widgets.Textarea(placeholder="Type your answer; then Reveal shows the model answer",
                             description=f"{name}, your answer:", style=_LABEL_STYLE,
                             layout=widgets.Layout(width="90%"))
    reveal = widgets.Button(description="Reveal", disabled=True,
                            tooltip=f"Show the model answer to {name} (type your own answer first)")
    ratings = widgets.ToggleButtons(options=[(r, i) for i, r in enumerate(RATINGS)], value=None,
                                    description=f"How well did you recall {name}?", style=_LABEL_STYLE,
                                    tooltip=f"Rate your recall of {name}", tooltips=list(RATING_TIPS))
    shown = widgets.Output()

    def on_type(change):
        reveal.disabled = not change["new"].strip()

    def on_reveal(_):
        if not typed.value.strip():  # a click that raced the text box
            return
        shown.clear_output()
        with shown:
            why = f"\n\n{question.why}" if question.why else ""
            display(Markdown(f"**Model answer:** {question.answer}{why}\n\nHow well did you recall it?"))
        ratings.layout.display = None

    def on_rate(change):
        if change["new"] is not None:
            quiz_answers.rate_recall(question, typed.value, change["new"], review=review)
            with shown:
                print(f"Saved: {RATINGS[change['new']]}.")

    ratings.layout.display = "none"
    typed.observe(on_type, names="value")
    reveal.on_click(on_reveal)
    ratings.observe(on_rate, names="value")
    return widgets.VBox([_prompt(question, number, review, note), typed, reveal, shown, ratings])


def question_widget(question, number, review="", note=""):
    """One question as widgets; `review`/`note` as in ``quiz.display_questions``."""
    if question.kind == "choice":
        return _choice_widget(question, number, review, note)
    if question.kind == "recall":
        return _recall_widget(question, number, review, note)
    return _typed_widget(question, number, review, note)
