"""What the "learner derives" tests read in a notebook: the text before each exercise, its hints,
and the expressions of the reference solution that must not appear there.

The rule (curriculum, "The learner derives"): before a graded exercise the notebook gives what is
needed to derive the answer, never the answer. Two kinds of answer are looked for in the text
before a solution cell, outside the collapsed `<details>` hints:
- the reference's own expressions, with names normalised (a renamed copy is still a copy),
  searched in code cells and in the code of markdown cells;
- the written forms of the answer that the solution cell declares in its metadata
  (`course.answer_forms`: a formula in LaTeX, a key line of code), searched everywhere.
"""
import ast
import builtins
import io
import keyword
import re
import tokenize

import course

# A sub-expression of the reference shorter than this (in tokens, names normalised) is too generic
# to be an answer: `x . sum ( 0 )` is in every notebook.
MIN_TOKENS = 10
# Names kept as they are when normalising: builtins and torch.func's API say what an expression
# does (`vmap(grad(f))` whether imported or written `torch.func.vmap(...)`), a learner's own names do not.
KEPT_NAMES = set(dir(builtins)) | {"vmap", "grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "functional_call"}
# Module prefixes dropped when normalising: `torch.nn.utils.clip_grad_norm_(...)` and
# `nn.utils.clip_grad_norm_(...)` are the same expression.
MODULES = {"torch", "func", "nn", "F", "functional", "utils", "autograd", "graph", "np", "math", "tl", "triton",
           "graphviz", "copy", "checkpoint"}
# Calls that only allocate or describe a tensor: an expression made of them is not an answer.
ALLOCATIONS = {"zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "arange",
               "tensor", "randn", "rand", "randint", "Size", "dtype", "device", "shape", "size", "numel", "to",
               "float", "double", "int", "len", "range", "isinstance", "tuple", "list", "dict", "zip"}
DETAILS = re.compile(r"<details\b.*?</details>", re.S | re.I)
HINT = re.compile(r"<details\b[^>]*>\s*<summary>(.*?)</summary>", re.S | re.I)
CODE_IN_MARKDOWN = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.S)
SHOW_QUESTION = re.compile(r"show_question\(\s*['\"]([\w-]+)['\"]\s*,\s*['\"]([\w-]+)['\"]\s*\)")
SHOW_QUIZ = re.compile(r"show_quiz\(\s*['\"]([\w-]+)['\"]\s*,\s*['\"]([\w-]+)['\"]\s*\)")


def normalised_tokens(source: str) -> list:
    """Tokens of Python `source` with a learner's own names replaced by `_` (attributes, keywords,
    builtins and torch.func's API kept, module prefixes dropped), strings by `S`; [] where it does
    not tokenize."""
    try:
        raw = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
               if t.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    out, i = [], 0
    while i < len(raw):
        tok, after_dot = raw[i], bool(out) and out[-1] == "."
        if tok.type == tokenize.NAME and tok.string in MODULES and not after_dot \
                and i + 1 < len(raw) and raw[i + 1].string == ".":
            i += 2  # `torch .` dropped; what follows is read as the start of the expression
            while i + 1 < len(raw) and raw[i].string in MODULES and raw[i + 1].string == ".":
                i += 2
            if i < len(raw) and raw[i].type == tokenize.NAME:
                out.append(raw[i].string)
                i += 1
            continue
        if tok.type == tokenize.NAME:
            keep = after_dot or keyword.iskeyword(tok.string) or tok.string in KEPT_NAMES
            out.append(tok.string if keep else "_")
        elif tok.type == tokenize.STRING:
            out.append("S")
        else:
            out.append(tok.string)
        i += 1
    return out


def normalised(source: str) -> str:
    return " ".join(normalised_tokens(source))


def solution_body(cell) -> str:
    """Every solution block of a cell (a class's methods may each have one), one after the other."""
    blocks = [part.split("### END SOLUTION")[0] for part in cell.source.split("### BEGIN SOLUTION")[1:]]
    return "\n".join(_dedented(block) for block in blocks)


def given_code(cell) -> str:
    """What a solution cell gives the learner around its solution blocks (the signature, the docstring,
    scaffolding such as a class's forward methods): the stub the release shows."""
    parts = cell.source.split("### BEGIN SOLUTION")
    return "\n".join([parts[0], *(part.split("### END SOLUTION", 1)[-1] for part in parts[1:])])


def _dedented(body: str) -> str:
    lines = [line for line in body.splitlines() if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    return "\n".join(line[indent:] for line in body.splitlines())


def _allocation_only(node) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Lambda, ast.Subscript)):
            return False
        if isinstance(sub, ast.Call):
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
            if name not in ALLOCATIONS:
                return False
    return True


def key_expressions(body: str) -> set:
    """The reference's expressions long enough to be an answer, each as normalised text."""
    try:
        tree = ast.parse(_dedented(body))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr) or _allocation_only(node):
            continue
        tokens = normalised_tokens(ast.unparse(node))
        if len(tokens) >= MIN_TOKENS:
            found.add(" ".join(tokens))
    return found


def _outside_details(markdown: str) -> str:
    return DETAILS.sub(" ", markdown)


def quiz_texts(cell) -> list:
    """What the quiz questions a code cell shows put in front of the learner (their code, prompt,
    choices and explanations): the text of a notebook, as much as its markdown."""
    from autograder.learner import quiz_schema
    found = []
    for notebook, section in SHOW_QUIZ.findall(cell.source):
        found += quiz_schema.load_quiz(notebook)[section][1]
    found += [quiz_schema.find_question(nb, qid) for nb, qid in SHOW_QUESTION.findall(cell.source)]
    return [text for q in found for text in (q.code, q.prompt, q.why, str(q.answer or ""),
                                             *(c.text for c in q.choices), *(c.why for c in q.choices))]


def code_of(cell, hints_removed=True) -> list:
    """The Python a cell shows: a code cell's source and its quiz questions' code, or the code blocks
    and spans of a markdown cell."""
    if cell.cell_type == "code":
        quiz = quiz_texts(cell)
        return [cell.source, *(q for q in quiz if normalised_tokens(q)),
                *(block or span for q in quiz for block, span in CODE_IN_MARKDOWN.findall(q))]
    text = _outside_details(cell.source) if hints_removed else cell.source
    return [block or span for block, span in CODE_IN_MARKDOWN.findall(text)]


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def course_meta(cell) -> dict:
    return cell.get("metadata", {}).get("course", {})


def exercises(solution_nb) -> list:
    """[(name, index of its solution cell, solution cell)] in notebook order."""
    return [(course.nbgrader_meta(c)["grade_id"].removesuffix("_solution"), i, c)
            for i, c in enumerate(solution_nb.cells)
            if course.nbgrader_meta(c).get("solution") and c.cell_type == "code"]


def index_in(nb, name: str) -> int:
    """Index of the solution cell of `name` in a notebook (release or source)."""
    for i, c in enumerate(nb.cells):
        if course.nbgrader_meta(c).get("grade_id") == f"{name}_solution":
            return i
    raise KeyError(name)


def leaks(nb, index: int, expressions: set, forms: list) -> list:
    """What the cells before `index`, and the stub at `index` (its docstring is the learner's), show
    of the answer: [(cell number, what)], outside hints."""
    found = []
    for number, cell in enumerate(nb.cells[:index + 1]):
        shown = " \n ".join(normalised(code) for code in code_of(cell))
        for expression in expressions:
            if expression in shown:
                found.append((number, f"the reference's expression `{expression}`"))
        text = squeezed(_outside_details(cell.source) if cell.cell_type == "markdown" else
                        cell.source + "".join(quiz_texts(cell)))
        for form in forms:
            if squeezed(form) in text:
                found.append((number, f"the answer form {form!r}"))
    return found


def region_before(nb, index: int) -> tuple:
    """(cells between the previous exercise group and this one, the names of this one's group).

    Solution cells with nothing between them (03's vjp_relu, vjp_sigmoid, vjp_tanh) form a group
    whose hints and questions all come before its first cell."""
    first = index
    while first > 0 and course.nbgrader_meta(nb.cells[first - 1]).get("solution"):
        first -= 1
    last = index
    while last + 1 < len(nb.cells) and course.nbgrader_meta(nb.cells[last + 1]).get("solution"):
        last += 1
    start = first
    while start > 0 and not course.nbgrader_meta(nb.cells[start - 1]).get("solution"):
        start -= 1
    group = [course.nbgrader_meta(c)["grade_id"].removesuffix("_solution") for c in nb.cells[first:last + 1]]
    return nb.cells[start:first], group


def hints_for(nb, index: int, name: str) -> list:
    """The hint summaries that belong to the exercise at `index`: in its region, and naming it when
    its group holds several exercises."""
    cells, group = region_before(nb, index)
    summaries = [s for c in cells if c.cell_type == "markdown" for s in HINT.findall(c.source)
                 if "hint" in s.lower()]
    if len(group) > 1:
        summaries = [s for s in summaries if re.search(rf"\b{re.escape(name)}\b", s)]
    return summaries


def questions_before(nb, index: int) -> list:
    """[(notebook, question id)] of the show_question calls in the region before the exercise."""
    cells, _group = region_before(nb, index)
    return [m for c in cells if c.cell_type == "code" for m in SHOW_QUESTION.findall(c.source)]


# --- a worked example that is the graded function itself ------------------------------------------------
# A worked example before an exercise must work another function (curriculum, "The learner derives"): the
# graded function's own backward, laid out op by op (07's BatchNorm table before `batchnorm_backward`), is
# its answer, transcribed line by line. The scan reads the notation table (docs/notation.md) to know that
# $\mu$, `mean` and `mu` are one quantity, $r$ and `rstd` another.
NOTATION = course.ROOT / "docs" / "notation.md"
MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)
# a gradient in LaTeX: d<symbol> (dr, d\sigma^2, d\hat x, dW_1, d\,\text{logits}) or \partial <symbol>
SYMBOL = (r"(?:\\hat\s*\{?\s*[A-Za-z]\s*\}?|\\(?:text|mathrm)\{\s*\w+\s*\}|\\[A-Za-z]+(?:\^\{?\d\}?)?"
          r"|[A-Za-z](?:_\{?\d+\}?)?(?:\^\{?\d\}?)?)")
GRADIENT_TEX = re.compile(r"(?:\\partial\s*|(?<![A-Za-z\\])d\s*(?:\\[,;!]\s*)?)(" + SYMBOL + ")")
GRADIENT_NAME = re.compile(r"^(?:dL_d|grad_|d)([A-Za-z]\w*)$")  # dL_dx, grad_x, dx, dmean: the gradient of x, mean
STATEMENTS = re.compile(r"\\qquad|\\quad|;|\\\\")


def math_word(tex: str) -> str:
    """A LaTeX symbol as one plain word, as code would spell it: `\\hat x` is `xhat`, `\\sigma^2` is `sigma2`,
    `W_1` is `W1`, `\\mu` is `mu`, `\\text{logits}` is `logits`."""
    hat = re.fullmatch(r"\\hat\s*\{?\s*([A-Za-z])\s*\}?", tex.strip())
    if hat:
        return hat[1] + "hat"
    text = re.fullmatch(r"\\(?:text|mathrm)\{\s*(\w+)\s*\}", tex.strip())
    if text:
        return text[1]
    return re.sub(r"[\\{}_^\s]", "", tex)


def notation_aliases(path=NOTATION) -> dict:
    """{spelling: the quantity's name in code} for every spelling the notation table gives (formulas, code and
    the "not" column): `mu`, `mean` and `\\mu` all name `mean`."""
    aliases = {}
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not line.startswith("|") or set(cells[0]) <= set("-"):
            continue
        code = re.findall(r"`([A-Za-z_]\w*)`", cells[2])
        if not code:  # a rule without a name in code (a layer's formula, Python's x[0]) names no quantity
            continue
        spellings = [math_word(m) for m in re.findall(r"\$([^$]+)\$", cells[1] + cells[3]) if re.fullmatch(SYMBOL, m)]
        spellings += re.findall(r"`([A-Za-z_]\w*)`", cells[2] + cells[3])
        for spelling in spellings:
            aliases.setdefault(spelling, code[0])
    return aliases


def _statements(markdown: str) -> list:
    """The LaTeX statements of a markdown text outside its hints: each math span split at ;, \\quad and line ends."""
    text = CODE_IN_MARKDOWN.sub(" ", _outside_details(markdown))
    return [part for m in MATH.finditer(text) for part in STATEMENTS.split(m[1] or m[2])]


def backward_symbols_in_markdown(markdown: str) -> set:
    """Every quantity a backward step of the text names: in each LaTeX statement whose left side is a gradient
    (`dr = ...`, `dc \\mathrel{+}= ...`, `\\partial L/\\partial x = ...`), the gradients on both sides."""
    found = set()
    for statement in _statements(markdown):
        left = statement.split("=")[0] if "=" in statement else ""
        if GRADIENT_TEX.search(left):
            found |= {math_word(s) for s in GRADIENT_TEX.findall(statement)}
    return found


def backward_symbols_in_code(source: str) -> set:
    """Every quantity a backward step of the code names: in each assignment to a gradient (`dmean = ...`,
    `dL_du = ...`, `grad_x += ...`), the gradients assigned and read."""
    try:
        tree = ast.parse(_dedented(source))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) \
            else []
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if any(GRADIENT_NAME.match(n) for n in names):
            read = [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)]
            found |= {GRADIENT_NAME.match(n)[1] for n in names + read if GRADIENT_NAME.match(n)}
    return found


def reference_intermediates(body: str) -> set:
    """The values the reference solution computes on its way to the answer, by name: the targets of its
    assignments, less gradients (the answer itself) and sizes read off a shape."""
    try:
        tree = ast.parse(_dedented(body))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or _allocation_only(node.value) or _shape_only(node.value):
            continue
        found |= {t.id for t in node.targets if isinstance(t, ast.Name) and not GRADIENT_NAME.match(t.id)}
    return found


def _shape_only(node) -> bool:
    """`x.shape[0]`, `len(x)`, `a, b = x.shape`: a size, not a value of the computation."""
    names = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | \
            {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    arithmetic = any(isinstance(n, (ast.BinOp, ast.UnaryOp)) for n in ast.walk(node))
    return bool(names & {"shape", "len", "size", "numel", "dim", "ndim"}) and not arithmetic


def worked_walk_of(nb, index: int, intermediates: set, aliases: dict) -> set:
    """The reference's intermediates (by their names in code) that the text and code before `index` walk
    backwards, outside hints: the quantities named by backward steps, read through `aliases`."""
    walked = set()
    for cell in nb.cells[:index]:
        if cell.cell_type == "markdown":
            walked |= backward_symbols_in_markdown(cell.source)
        for code in code_of(cell):
            walked |= backward_symbols_in_code(code)
    canonical = {aliases.get(name, name) for name in walked}
    return {name for name in intermediates if aliases.get(name, name) in canonical}


def walks_the_reference(intermediates: set, walked: set) -> bool:
    """Whether a walk that names `walked` of the reference's `intermediates` is the graded function's own: all
    of them, or all but one when there are three or more (one step left out does not make it another function)."""
    return len(intermediates) >= 2 and len(walked) >= max(2, len(intermediates) - 1)
