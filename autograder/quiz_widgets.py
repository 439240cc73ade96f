"""The ipywidgets face of the quizzes; all scoring and saving stays in ``autograder.quiz``."""
import string

import ipywidgets as widgets
from IPython.display import Markdown, display

from autograder import quiz


def _prompt(question, number):
    out = widgets.Output()
    with out:
        display(Markdown(f"**Q{number}.** {question.prompt}"))
    return out


def _choice_widget(question, number):
    options = [(f"({letter}) {c['text']}", i)
               for i, (letter, c) in enumerate(zip(string.ascii_lowercase, question.choices))]
    picker = widgets.RadioButtons(options=options, value=None, layout=widgets.Layout(width="auto"))
    button = widgets.Button(description="Check", tooltip="Check your answer")
    feedback = widgets.Output()

    def on_check(_):
        feedback.clear_output()
        with feedback:
            if picker.value is None:
                print("Pick an answer first.")
                return
            result = quiz.check_choice(question, picker.value)
            display(Markdown(("✅ " if result.correct else "❌ ") + result.text))

    button.on_click(on_check)
    return widgets.VBox([_prompt(question, number), picker, button, feedback])


def _recall_widget(question, number):
    typed = widgets.Textarea(placeholder="Type your answer before you reveal the model answer",
                             layout=widgets.Layout(width="90%"))
    reveal = widgets.Button(description="Reveal", tooltip="Show the model answer")
    ratings = widgets.ToggleButtons(options=[(r, i) for i, r in enumerate(quiz.RATINGS)], value=None,
                                    tooltips=["I did not know", "I struggled", "I knew it", "It was easy"])
    shown = widgets.Output()

    def on_reveal(_):
        shown.clear_output()
        with shown:
            display(Markdown(f"**Model answer:** {question.answer}\n\nHow well did you recall it?"))
        ratings.layout.display = None

    def on_rate(change):
        if change["new"] is not None:
            quiz.rate_recall(question, typed.value, change["new"])
            with shown:
                print(f"Saved: {quiz.RATINGS[change['new']]}.")

    ratings.layout.display = "none"
    reveal.on_click(on_reveal)
    ratings.observe(on_rate, names="value")
    return widgets.VBox([_prompt(question, number), typed, reveal, shown, ratings])


def question_widget(question, number):
    if question.kind == "choice":
        return _choice_widget(question, number)
    return _recall_widget(question, number)
