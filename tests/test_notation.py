"""One notation for the whole course (docs/notation.md): what a scan can check of it.

The page is the authors' table; these tests hold the parts of it that text can show: derive questions
count entries from 1, and the spellings the table rules out appear in no notebook (but a graded name that a
notebook keeps and says so, 07's `dout`). Letters that another notebook uses for another quantity (B for a
batch where 03's `vjp_matmul` has a matrix B) are the author's to check with the table.
"""
import re

import course
import derivation
import pytest
import yaml

from autograder.learner import quiz_schema

README = course.ROOT / "README.md"
# an entry of a vector counted from 0: x₀, z_0, x_{0} (Python's x[0] is another notation, and allowed)
ENTRY_FROM_ZERO = re.compile(r"[A-Za-zα-ωΑ-Ω]\u0302?(?:₀|_0(?![\d.])|_\{0\})")
# spellings the table's "not" column rules out, each with the scan that finds it
RULED_OUT = {
    "istd": re.compile(r"\bistd\b"),
    "inv_std": re.compile(r"\binv_std\b"),
    "xhat": re.compile(r"\bxhat\b"),
    "dout": re.compile(r"\bdout\b"),
    r"\epsilon": re.compile(r"\\epsilon\b"),
}
# 07's functions take `dout` by their graded signature, a switch 07 states
ALLOWED = {"07_by_hand": {"dout"}}


def table_rows() -> dict:
    """{quantity (the first column): [the other columns]} of the notation table."""
    rows = {}
    for line in derivation.NOTATION.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 5 and not set(cells[0]) <= set("-") and cells[0] != "quantity":
            rows[cells[0]] = cells[1:]
    return rows


def test_the_notation_page_is_linked_from_the_readme_and_lists_what_the_scans_read():
    assert "docs/notation.md" in README.read_text()
    rows = table_rows()
    for quantity in ("batch size", "row width", "upstream gradient", "reciprocal standard deviation",
                     "linear layer's weight", "an entry of a vector", "a derive question's entries"):
        assert any(quantity in name for name in rows), f"docs/notation.md has no row for the {quantity}"
    ruled_out = " ".join(columns[2] for columns in rows.values())
    for spelling in RULED_OUT:
        assert f"`{spelling}`" in ruled_out or f"${spelling}$" in ruled_out, \
            f"the tests rule out {spelling!r}, which the table's 'not' column does not list"
    aliases = derivation.notation_aliases()
    assert aliases["mu"] == aliases["mean"] == "mean" and aliases["r"] == aliases["istd"] == "rstd"
    assert aliases["sigma2"] == "var" and aliases["xhat"] == "x_hat" and aliases["dout"] == "grad_out"


def _texts(question: dict) -> list:
    """Every string a derive question shows, but its code (where x[0] is Python's): prompt, explanations,
    choices, the feedback of its expected misses."""
    found, stack = [], [{k: v for k, v in question.items() if k not in ("code", "id")}]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@pytest.mark.parametrize("notebook", course.assignment_names())
def test_derive_questions_count_entries_from_one(notebook):
    raw = yaml.safe_load((quiz_schema.quiz_folder() / f"{notebook}.yaml").read_text())
    found = [(q["id"], m[0]) for q in raw["sections"].get("derive", {}).get("questions", [])
             for text in _texts(q) for m in ENTRY_FROM_ZERO.finditer(text)]
    assert found == [], f"{notebook}: derive questions count entries from 0 (the course counts from 1): {found}"


def test_the_entry_scan_tells_subscripts_from_python_indices():
    assert [m[0] for m in ENTRY_FROM_ZERO.finditer("∂y₀/∂z₁, dL/dx_0, x_{0}, x̂₀")] == ["y₀", "x_0", "x_{0}", "x̂₀"]
    assert not ENTRY_FROM_ZERO.search("x.grad[0], W[1, 0], z[0], 1e-0, row 0, h_1, x_10, y₁")


def _shown_text(notebook: str) -> str:
    """Everything a notebook shows: its solution source (markdown and code) and its quiz file."""
    nb = course.read(course.solution_path(notebook))
    quiz = quiz_schema.quiz_folder() / f"{notebook}.yaml"
    return "\n".join(c.source for c in nb.cells) + "\n" + (quiz.read_text() if quiz.is_file() else "")


@pytest.mark.parametrize("notebook", course.assignment_names())
def test_no_notebook_writes_a_spelling_the_table_rules_out(notebook):
    text = _shown_text(notebook)
    found = {spelling: len(scan.findall(text)) for spelling, scan in RULED_OUT.items()
             if spelling not in ALLOWED.get(notebook, set()) and scan.search(text)}
    assert found == {}, f"{notebook} writes spellings docs/notation.md rules out (how many times): {found}"
