"""Read the reach of a by-hand answer as an allow-list: what every name, call and attribute in it is, or a refusal.

The judge (`autograder.grader.judge`) hands this module the statements an answer reaches
(`autograder.grader.reach`), which are exactly what the grader's fresh kernel runs before it grades
the answer. Every expression used as something to call or to read an attribute from must be typed:

- a module of the list below, or an object reached from one by a public path, looked up here on the
  real modules (`torch.nn.functional.torch.autograd.grad` is `torch.autograd.grad`) and held to the
  exercise's rule (`autograder.checks.rules`);
- the learner's own definitions (a function, a class, an instance of one, an autograd.Function's `ctx`),
  whose bodies are read too;
- a value: a parameter, a call's result, a number, a container. On a value only the attributes of the
  usual runtime types (tensors, modules, optimizers, Python's containers, ...) and of the learner's own
  classes may be read; a name the rule refuses there (`.backward`) only where the learner's own classes
  in the answer define it, a case the kernel's guards judge at run time.

What cannot be typed (a module handed to a function or stored in a container, a boolean operator or a
conditional that may be a module or a function, a match capture, a computed `getattr`) is refused where it
is called or read from, with a line that says what to write instead. So is what no answer needs and the
judge cannot follow: a module outside the list, reflection, a store on a module or a library's class.

What an answer may reach is listed in `autograder.grader.answer_rules`. The module is long (about 800
lines) because one reader types every construct of Python an answer may hold, and the checks of each
construct read best next to the typing they depend on.
"""
import ast
import builtins
import dataclasses
import types

from autograder.grader.answer_rules import (
    ALLOWED_BUILTINS,
    ALLOWED_PRIVATE,
    ANSWER_MODULES,
    ANSWER_OBJECTS,
    CTX_METHODS,
    CTX_NAMES,
    DENIED_DUNDERS,
    DENIED_PATHS,
    IPYTHON_NAMES,
    SYS_PARTS,
    canonical,
    refused_by,
    resolve,
    tensor_maths_names,
    value_names,
)
from autograder.grader.notebook_code import constant_getattr


# --- what an expression is -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Mod:
    path: str
    given: bool = False  # the course's statements bound it (the course's checks may hand an answer helpers)


@dataclasses.dataclass(frozen=True)
class Obj:
    """A known object that is not a module, by the path it was reached by (canonical)."""
    path: str
    given: bool = False


@dataclasses.dataclass(frozen=True, eq=False)
class Own:
    """A function, lambda or class of the notebook."""
    node: ast.AST
    scope: "Scope"  # where it was defined
    course: bool


@dataclasses.dataclass(frozen=True)
class Inst:
    cls: Own


@dataclasses.dataclass(frozen=True)
class Builtin:
    name: str


@dataclasses.dataclass(frozen=True)
class Unknown:
    why: str  # "a boolean operator", ...


@dataclasses.dataclass(frozen=True)
class Marker:
    name: str


VAL = Marker("value")  # a runtime value: a tensor, a number, a container, a call's result
COURSE = Marker("the course's value")  # what the course's own statements bound and the judge cannot tell: trusted
UNBOUND = Marker("unbound")  # a name nothing in the program binds: it raises NameError before anything is read
CTX = Marker("ctx")  # an autograd.Function's ctx
KLASS = Marker("class")  # a class as a runtime value (type(x)): readable, never changed
DATA = (Inst, Marker)


def _is_data(t) -> bool:
    return isinstance(t, DATA)


@dataclasses.dataclass(frozen=True)
class Finding:
    node: ast.AST
    home: object  # the reach.Statement it is in
    what: str
    kind: str  # "forbidden" (by the rule), "unreadable" (the allow-list), "store" (a patch), "reflection"
    nested: bool  # inside a function body: runs only when called
    unless_own: str | None = None  # not a finding where the learner's own classes define this attribute


# --- scopes ----------------------------------------------------------------------------------------
class Scope:
    """The names one function, lambda, comprehension, class body or the module binds, with what they hold.
    A binding is ("expr", node) (its value), ("elements", node) (an element of it), ("type", types) or
    ("import", dotted path)."""

    def __init__(self, kind, parent=None, owner=None, course=False):
        self.kind, self.parent, self.owner, self.course = kind, parent, owner, course
        self.names, self.globals, self.nonlocals = {}, set(), set()

    def bind(self, name, binding):
        self.names.setdefault(name, []).append((binding, self))


def _target_bindings(target, value, kind="expr"):
    """(name, binding) for each name a target binds from `value` (pairwise from a literal tuple)."""
    if isinstance(target, ast.Name):
        return [(target.id, (kind, value))]
    if isinstance(target, ast.Starred):
        return [(name, ("type", frozenset({VAL}))) for name, _ in _target_bindings(target.value, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        if kind == "expr" and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
            return [pair for t, v in zip(target.elts, value.elts) for pair in _target_bindings(t, v)]
        return [pair for t in target.elts for pair in _target_bindings(t, value, "elements")]
    return []  # an attribute or an item: binds no name


def _import_bindings(node):
    if isinstance(node, ast.Import):
        for alias in node.names:
            path = alias.name if alias.asname else alias.name.split(".")[0]
            yield alias.asname or path, ("import", path)
    elif not node.level:
        for alias in node.names:
            if alias.name != "*":
                yield alias.asname or alias.name, ("import", f"{node.module}.{alias.name}")


def bind_block(scope, body):
    """Bind in `scope` every name the statements of a block bind (not inside nested functions or classes)."""
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope.bind(node.name, ("def", node))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name, binding in _import_bindings(node):
                scope.bind(name, binding)
        elif isinstance(node, ast.Global):
            scope.globals |= set(node.names)
        elif isinstance(node, ast.Nonlocal):
            scope.nonlocals |= set(node.names)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                for name, binding in _target_bindings(target, node.value):
                    scope.bind(name, binding)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            for name, binding in _target_bindings(node.target, node.value):
                scope.bind(name, binding)
        elif isinstance(node, ast.AugAssign):
            for name, _ in _target_bindings(node.target, None):
                scope.bind(name, ("type", frozenset({VAL})))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for name, binding in _target_bindings(node.target, node.iter, "elements"):
                scope.bind(name, binding)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    for name, _ in _target_bindings(item.optional_vars, None):
                        scope.bind(name, ("with", item.context_expr))
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for handler in node.handlers:
                if handler.name:
                    scope.bind(handler.name, ("type", frozenset({VAL})))
                stack.extend(handler.body)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for part in ast.walk(case.pattern):
                    for name in filter(None, [getattr(part, "name", None), getattr(part, "rest", None)]):
                        scope.bind(name, ("match", node.subject))
                stack.extend(case.body)
        for part in _walk_here(node):  # a walrus binds in the enclosing function
            if isinstance(part, ast.NamedExpr):
                scope.bind(part.target.id, ("expr", part.value))
        for field in ("body", "orelse", "finalbody"):
            stack.extend(s for s in getattr(node, field, []) or [] if isinstance(s, ast.stmt))


def _walk_here(node):
    """The expressions of a statement itself (not of its blocks, nested functions or lambdas)."""
    stack = [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.stmt)]
    while stack:
        part = stack.pop()
        yield part
        if not isinstance(part, ast.Lambda):
            stack.extend(c for c in ast.iter_child_nodes(part) if not isinstance(c, ast.stmt))


# --- the reader ------------------------------------------------------------------------------------
class AnswerReader(ast.NodeVisitor):
    """Types and checks the student's statements of an answer program against a rule (`autograder.checks.rules`),
    collecting `findings`, per statement. `statements`: the program's, course's included (typed, not judged)."""

    def __init__(self, statements, rule, own_names, given=frozenset(), tests=()):
        self.rule_parts = rule.parts if rule is not None else ()
        self.own_names, self.given = own_names, given  # given: paths the notebook as released imports
        tests_scope = Scope("module-part")
        tests_scope.names = {}
        for tree in tests:  # names a test cell binds exist in the kernel in plain mode: the course's, not given
            bind_block(tests_scope, tree.body)
        self.module = Scope("module")
        self.findings = []
        self._memo, self._busy = {}, set()
        self.kernel_maths = any(part.kernel_maths for part in self.rule_parts)
        self.stars = [node.module for s in statements for node in ast.walk(s.node)
                      if isinstance(node, ast.ImportFrom) and not node.level and any(a.name == "*" for a in node.names)
                      and node.module.split(".")[0] in ANSWER_MODULES]
        for statement in statements:
            self._bind_module(statement)
        for name, bindings in tests_scope.names.items():
            self.module.names.setdefault(name, []).extend(bindings)
        self.scope, self.home, self.depth, self.in_kernel = self.module, None, 0, False
        self.receivers, self.getattr_calls, self.callees = set(), set(), set()

    def _bind_module(self, statement):
        scope = Scope("module-part", owner=statement, course=statement.course)
        scope.names = self.module.names  # one namespace; each binding remembers whether it is the course's
        scope.globals = set()
        bind_block(scope, [statement.node])
        for node in ast.walk(statement.node):  # `global x` in a function binds x here too, to a value
            if isinstance(node, ast.Global):
                for name in node.names:
                    scope.bind(name, ("type", frozenset({VAL})))

    def read(self, statement):
        """Check one of the student's statements, whole (function bodies included)."""
        self.home, self.scope, self.depth, self.in_kernel = statement, self._module_part(statement), 0, False
        self.receivers = {id(n.value) for n in ast.walk(statement.node) if isinstance(n, ast.Attribute)}
        self.getattr_calls = {id(n.func) for n in ast.walk(statement.node) if constant_getattr(n) is not None}
        self.callees = {id(n.func) for n in ast.walk(statement.node) if isinstance(n, ast.Call)}
        try:
            self.visit(statement.node)
        except RecursionError:
            self.report(statement.node, "nests its code too deeply for the judge to read", "unreadable")

    def _module_part(self, statement):
        scope = Scope("module-part", owner=statement, course=statement.course)
        scope.names = self.module.names
        return scope

    def report(self, node, what, kind, unless_own=None):
        self.findings.append(Finding(node, self.home, what, kind, self.depth > 0, unless_own))

    # -- names
    def name_types(self, name, scope) -> frozenset:
        start = scope
        while scope is not None:
            if name in scope.globals:
                scope = self.module
                break
            if name in scope.names and (scope is start or scope.kind != "class") and name not in scope.nonlocals:
                break
            scope = scope.parent
        if scope is None:
            scope = self.module
        found = set()
        for binding, where in scope.names.get(name, ()):
            found |= self._binding_types(binding, where)
        if not scope.names.get(name):
            starred = [m for m in self.stars if resolve(f"{m}.{name}") is not None]
            if starred:
                return frozenset(t for m in starred for t in self.attribute(Mod(m), name))
            if name in IPYTHON_NAMES or name == "display":
                return frozenset({Builtin(name)})
            if hasattr(builtins, name):
                return frozenset({Builtin(name)})
            return frozenset({UNBOUND})
        return frozenset(found)

    def _binding_types(self, binding, where) -> frozenset:
        kind, payload = binding
        if kind == "import":
            found = self._import_types(payload)
        elif kind == "def":
            found = self._def_types(payload, where)
        elif kind == "type":
            found = payload
        elif kind == "expr":
            found = self.types(payload, where)
        elif kind == "elements":
            found = self.element_types(payload, where)
        elif kind == "with":
            context = self.types(payload, where)
            found = frozenset({VAL}) if all(_is_data(t) or isinstance(t, Obj) for t in context) else frozenset(
                {Unknown("the value of a `with` whose manager the judge cannot tell")})
        else:  # a match capture
            subject = self.types(payload, where)
            found = frozenset({VAL}) if all(_is_data(t) for t in subject) else frozenset({Unknown("a match capture")})
        if where.course:  # the course's own values are data, whatever the judge can tell of them
            found = frozenset(COURSE if isinstance(t, Unknown) or t is VAL else
                              dataclasses.replace(t, given=True) if isinstance(t, (Mod, Obj)) else t for t in found)
        return found

    def _import_types(self, path) -> frozenset:
        if path in ANSWER_OBJECTS:
            return frozenset({Obj(path)})
        if path.split(".")[0] not in ANSWER_MODULES:
            return frozenset({Mod(path)})  # a module an answer may not use: never imported here, refused where used
        obj = resolve(path)
        if isinstance(obj, types.ModuleType):
            return frozenset({Mod(obj.__name__)})
        if obj is None:
            return frozenset({VAL})  # not importable here: the import fails when it runs
        return frozenset({Obj(canonical(path))})

    def _def_types(self, node, where) -> frozenset:
        own = Own(node, where, where.course)
        decorators = [self.types(d, where) for d in node.decorator_list]
        if any(isinstance(t, Unknown) for found in decorators for t in found):
            return frozenset({Unknown("a definition whose decorator the judge cannot tell")})
        if all(all(isinstance(t, (Obj, Builtin)) for t in found) for found in decorators):
            return frozenset({own})  # a library's decorator (staticmethod, triton.jit, functools.cache): the same code
        return frozenset({VAL, own})

    # -- expressions
    def types(self, node, scope) -> frozenset:
        key = (id(node), id(scope))
        if key in self._memo:
            return self._memo[key][0]
        if key in self._busy:
            return frozenset({VAL})
        self._busy.add(key)
        try:
            found = self._types(node, scope)
        finally:
            self._busy.discard(key)
        self._memo[key] = (found, node, scope)  # the node and scope kept alive, so that no id is reused
        return found

    def _types(self, node, scope) -> frozenset:
        if isinstance(node, ast.Name):
            return self.name_types(node.id, scope)
        if isinstance(node, ast.Attribute):
            return frozenset(t for r in self.types(node.value, scope) for t in self.attribute(r, node.attr))
        if isinstance(node, ast.Call):
            constant = constant_getattr(node)
            if constant is not None:
                return frozenset(t for r in self.types(constant[0], scope) for t in self.attribute(r, constant[1]))
            return frozenset(t for callee in self.types(node.func, scope) for t in self.call_result(callee))
        if isinstance(node, (ast.BoolOp, ast.IfExp)):
            parts = node.values if isinstance(node, ast.BoolOp) else [node.body, node.orelse]
            return _data_or(frozenset(t for p in parts for t in self.types(p, scope)),
                            "a boolean operator" if isinstance(node, ast.BoolOp) else "a conditional expression")
        if isinstance(node, ast.NamedExpr):
            return _data_or(self.types(node.value, scope), "an assignment expression (:=)")
        if isinstance(node, ast.Subscript):
            if isinstance(node.value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
                return self.element_types(node.value, scope, "an item of a container")
            held = self.types(node.value, scope)
            return _data_or(held, "an item of a container") if any(isinstance(t, Unknown) for t in held) \
                else frozenset({VAL})
        if isinstance(node, ast.Lambda):
            return frozenset({Own(node, scope, scope.course)})
        if isinstance(node, ast.Starred):
            return self.types(node.value, scope)
        return frozenset({VAL})

    def element_types(self, node, scope, what="an element of a container") -> frozenset:
        """What iterating over `node` (or indexing it) gives."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return _data_or(frozenset(t for e in node.elts for t in self.types(e, scope)), what)
        if isinstance(node, ast.Dict):
            return _data_or(frozenset(t for e in [*node.keys, *node.values] if e is not None
                                      for t in self.types(e, scope)), what)
        return _data_or(frozenset(VAL if isinstance(t, (Builtin, Obj)) else t for t in self.types(node, scope)), what)

    def call_result(self, callee) -> frozenset:
        if isinstance(callee, Own):
            return frozenset({Inst(callee)}) if isinstance(callee.node, ast.ClassDef) else frozenset({VAL})
        if isinstance(callee, Builtin) and callee.name == "type":
            return frozenset({KLASS})
        if isinstance(callee, Unknown) or callee is UNBOUND:
            return frozenset({callee})
        return frozenset({VAL})

    def attribute(self, receiver, name) -> frozenset:
        """What `receiver.name` is (no check: `check_attribute` refuses)."""
        if isinstance(receiver, Mod) and receiver.path.split(".")[0] not in ANSWER_MODULES:
            return frozenset({VAL})
        if receiver is COURSE or receiver is UNBOUND:
            return frozenset({receiver})
        if isinstance(receiver, (Mod, Obj)):
            path = f"{receiver.path}.{name}"
            obj = resolve(path)
            if isinstance(obj, types.ModuleType):  # what is reached from the course's names is not the course's gift
                return frozenset({Mod(obj.__name__)})
            return frozenset({Obj(canonical(path))}) if obj is not None else frozenset({VAL})
        if isinstance(receiver, Own) and isinstance(receiver.node, ast.ClassDef) or isinstance(receiver, Inst):
            cls = receiver if isinstance(receiver, Own) else receiver.cls
            return self.class_attribute(cls, name, set())
        if name == "__class__":
            return frozenset({KLASS})
        if isinstance(receiver, Unknown):
            return frozenset({receiver})
        return frozenset({VAL})

    def class_attribute(self, cls, name, seen) -> frozenset:
        """An attribute of one of the notebook's classes: its body's, its own bases', a library base's, or a value."""
        if id(cls) in seen:
            return frozenset({VAL})
        seen.add(id(cls))
        body = Scope("class", cls.scope, course=cls.course)
        bind_block(body, cls.node.body)
        if name in body.names:
            return frozenset(t for binding, where in body.names[name] for t in self._binding_types(binding, where))
        for base in cls.node.bases:
            for kind in self.types(base, cls.scope):
                if isinstance(kind, Own) and isinstance(kind.node, ast.ClassDef):
                    found = self.class_attribute(kind, name, seen)
                    if found != frozenset({VAL}):
                        return found
                elif isinstance(kind, Obj) and resolve(f"{kind.path}.{name}") is not None:
                    return frozenset({Obj(f"{kind.path}.{name}")})
        return frozenset({VAL})

    # -- checks
    def check_used(self, found, node):
        """What a name or attribute stands for, where it is used (not only read through): held to the rule."""
        for kind in found:
            if isinstance(kind, Obj) and (not kind.given or id(node) in self.callees):  # the course's: when called
                why = self.refuses(kind.path, kind.given)
                if why:
                    self.report(node, why, "forbidden")

    def refuses(self, path, given=False) -> str | None:
        for denied, why in DENIED_PATHS.items():
            if (path == denied or path.startswith(denied + ".")) and not given and path not in self.given:
                return f"uses {path}, which {why}"
        for part in self.rule_parts:
            what = refused_by(part, path, self.in_kernel)
            if what:
                return f"{what}: {part.why}"
        return None

    def check_attribute(self, node):
        receiver = self.types(node.value, self.scope)
        name, text = node.attr, _shown(node)
        storing = isinstance(node.ctx, (ast.Store, ast.Del))
        if name in DENIED_DUNDERS:
            return self.report(node, f"reaches .{name}, which walks to code, frames, namespaces or every class",
                               "reflection")
        for kind in receiver:
            if isinstance(kind, Unknown):
                return self.report(node, f"`{text}` cannot be read: the judge cannot tell what `{_shown(node.value)}` "
                                         f"is ({kind.why}); name what you use directly (`torch.{name}`, a variable "
                                         "of your own)", "store" if storing else "unreadable")
            if storing and (isinstance(kind, (Mod, Obj)) or kind is KLASS):
                what = kind.path if isinstance(kind, (Mod, Obj)) else _shown(node.value)
                verb = "deletes" if isinstance(node.ctx, ast.Del) else "changes"
                return self.report(node, f"{verb} {what}.{name}: an answer may not change a library", "store")
            if isinstance(kind, (Mod, Obj)):
                self._check_path_step(kind.path, name, node)
            elif kind is CTX and not storing and name not in CTX_NAMES | self.own_names \
                    and not name.startswith("__"):
                self.report(node, f"`{text}`: ctx has no field {name} that your Function sets, and it is not a part of "
                                  "autograd's ctx the judge knows", "unreadable")
            elif kind in (VAL, KLASS) and not storing:
                self._check_value_attribute(name, text, node)

    def _check_path_step(self, path, name, node):
        full = f"{path}.{name}"
        if path.split(".")[0] not in ANSWER_MODULES:
            return self.report(node, f"uses {path}, which an answer may not use (code outside the answer may)",
                               "reflection")
        if name.startswith("_") and not name.startswith("__") and canonical(full) not in ALLOWED_PRIVATE:
            return self.report(node, f"reaches {full}, a private part of {path.split('.')[0]}", "reflection")
        if path == "sys" and name not in SYS_PARTS:
            return self.report(node, f"reaches sys.{name}, a part of the interpreter an answer may not reach (it "
                                     f"may read sys.{', sys.'.join(sorted(SYS_PARTS))})", "reflection")
        if resolve(full) is None and full not in ANSWER_OBJECTS:
            self.report(node, f"reads {full}, which does not exist here", "unreadable")

    def _check_value_attribute(self, name, text, node):
        if self.in_kernel:
            if name.startswith("_") and not name.startswith("__") and name not in self.own_names:
                self.report(node, f"`{text}` reads a private part of a value", "reflection")
            return
        if name.startswith("__"):
            return
        refused = next((part for part in self.rule_parts if name in part.names), None)
        if refused is not None:
            return self.report(node, f"calls .{name}: {refused.why}", "forbidden", unless_own=name)
        if self.kernel_maths and name in tensor_maths_names():
            why = next(part.why for part in self.rule_parts if part.kernel_maths)
            return self.report(node, f"calls .{name}() outside a kernel: {why}", "forbidden", unless_own=name)
        if name.startswith("_"):
            return self.report(node, f"`{text}` reads a private part of a value; only your own classes' private "
                                     "attributes may be read in an answer", "reflection", unless_own=name)
        if name not in value_names():
            self.report(node, f"`{text}`: {name} is not an attribute the judge knows on a tensor, a Python value or "
                              "a class of yours", "unreadable", unless_own=name)

    def no_module(self, node):
        """A module handed to a function, stored, returned or put in a container goes where names cannot follow it."""
        if node is None:
            return
        modules = sorted(t.path for t in self.types(node, self.scope) if isinstance(t, Mod))
        if modules:
            self.report(node, f"hands the module {modules[0]} around, where the judge cannot follow it: use it by its "
                              "name", "store")

    # -- the walk
    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store) and node.id in ("__module__", "__qualname__") and self.scope.kind == "class":
            return self.report(node, f"sets a class's {node.id}, which would pass it off as another module's",
                               "store")
        if not isinstance(node.ctx, ast.Load):
            return
        found = self.types(node, self.scope)
        for kind in found:
            if isinstance(kind, Builtin):
                self._check_builtin(kind.name, node)
        if id(node) not in self.receivers:
            self.check_used(found, node)

    def _check_builtin(self, name, node):
        if name == "getattr" and id(node) not in self.getattr_calls:
            self.report(node, "uses getattr with a computed name, which the judge cannot follow: write obj.name",
                        "reflection")
        elif name in IPYTHON_NAMES:
            self.report(node, f"uses IPython's {name}, which reaches the kernel and every cell", "reflection")
        elif name not in ALLOWED_BUILTINS | {"display", "getattr"}:
            self.report(node, f"uses {name}, which an answer may not use (it reaches objects, code or files by "
                              "computed names)", "reflection")

    def visit_Attribute(self, node):
        self.visit(node.value)
        self.check_attribute(node)
        if isinstance(node.ctx, ast.Load) and id(node) not in self.receivers:
            self.check_used(self.types(node, self.scope), node)

    def visit_Call(self, node):
        constant = constant_getattr(node)
        if constant is not None:  # getattr(x, "name"): an attribute written another way
            attribute = ast.copy_location(ast.Attribute(constant[0], constant[1], ast.Load()), node)
            self.visit(attribute)
            for default in node.args[2:]:
                self.visit(default)
            return
        self.visit(node.func)
        callee = self.types(node.func, self.scope)
        unknown = next((t for t in callee if isinstance(t, Unknown)), None)
        if unknown is not None and not isinstance(node.func, ast.Attribute):
            self.report(node, f"`{_shown(node.func)}` cannot be called: the judge cannot tell what it is "
                              f"({unknown.why}); call the function by its name", "unreadable")
        for argument in [*node.args, *[k.value for k in node.keywords]]:
            self.visit(argument)
            self.no_module(argument.value if isinstance(argument, ast.Starred) else argument)

    def visit_Import(self, node):
        for alias in node.names:
            self._check_import(alias.name, node)
            if alias.asname:
                self.check_used(self._import_types(alias.name), node)

    def visit_ImportFrom(self, node):
        if node.level:
            return self.report(node, "imports a module of its own, which the judge does not read: put its code in "
                                     "a cell of the notebook", "unreadable")
        self._check_import(node.module, node)
        for alias in node.names:
            path = node.module if alias.name == "*" else f"{node.module}.{alias.name}"
            if alias.name != "*":
                if alias.name.startswith("_") and f"{node.module}.{alias.name}" not in ALLOWED_PRIVATE:
                    self.report(node, f"reaches {path}, a private part of {node.module.split('.')[0]}", "reflection")
                elif path not in ANSWER_OBJECTS:
                    self.check_used(self._import_types(path), node)

    def _check_import(self, module, node):
        top = module.split(".")[0]
        if any(p.startswith("_") for p in module.split(".")):
            return self.report(node, f"imports {module}, a private part of {top}", "reflection")
        if top == "IPython" and module == "IPython.display":
            return None
        if top not in ANSWER_MODULES:
            return self.report(node, f"imports {module}, which an answer may not use (the judge reads "
                                     f"{', '.join(sorted(ANSWER_MODULES - {'autograder'}))} and the course's "
                                     "autograder.learner; code outside the answer may import anything)", "unreadable")
        given = any(path == module or path.startswith(module + ".") for path in self.given)
        why = None if given else self.refuses(module)
        if why and any(module == d or module.startswith(d + ".") for d in DENIED_PATHS):
            self.report(node, why, "forbidden")

    def visit_Constant(self, node):
        if isinstance(node.value, str) and ("solutions/" in node.value or "answer_key" in node.value):
            self.report(node, "names the course's solutions or answer keys", "forbidden")

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)
        if not all(isinstance(t, ast.Name) for t in node.targets):
            if not (len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)
                    and isinstance(node.value, ast.Tuple)):
                self.no_module(node.value)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        self.no_module(node.value)

    def visit_Return(self, node):
        self.generic_visit(node)
        self.no_module(node.value)

    def visit_Yield(self, node):
        self.generic_visit(node)
        self.no_module(node.value)

    visit_YieldFrom = visit_Yield

    def visit_List(self, node):
        self.generic_visit(node)
        for element in node.elts:
            self.no_module(element)

    visit_Tuple = visit_Set = visit_List

    def visit_Dict(self, node):
        self.generic_visit(node)
        for element in [*node.keys, *node.values]:
            self.no_module(element)

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            held = self.types(node.value, self.scope)
            if any(isinstance(t, (Mod, Obj, Unknown)) or t is KLASS for t in held):
                self.report(node, f"changes an item of `{_shown(node.value)}`: an answer may not change a library",
                            "store")

    def visit_FunctionDef(self, node):
        for child in [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d],
                      *[a.annotation for a in _arguments(node.args) if a.annotation], node.returns]:
            if child is not None:
                self.visit(child)
                self.no_module(child)
        kernel = self.in_kernel or any(_is_kernel(self.types(d.func if isinstance(d, ast.Call) else d, self.scope))
                                       for d in node.decorator_list)
        scope = self._function_scope(node)
        self._inside(scope, node.body, kernel)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        for child in [*node.args.defaults, *[d for d in node.args.kw_defaults if d]]:
            self.visit(child)
            self.no_module(child)
        self._inside(self._function_scope(node), [node.body], self.in_kernel)

    def _inside(self, scope, body, kernel):
        saved = self.scope, self.depth, self.in_kernel
        self.scope, self.depth, self.in_kernel = scope, self.depth + 1, kernel
        try:
            for part in body:
                self.visit(part)
        finally:
            self.scope, self.depth, self.in_kernel = saved

    def _function_scope(self, node):
        parent, owner = self.scope, self.scope if self.scope.kind == "class" else None
        while parent.kind == "class":  # a method does not see its class body's names
            parent = parent.parent
        scope = Scope("function", parent, course=parent.course)
        arguments = _arguments(node.args)
        defaults = dict(zip([a.arg for a in (node.args.posonlyargs + node.args.args)][::-1], node.args.defaults[::-1]))
        defaults.update({a.arg: d for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None})
        for arg in arguments:
            scope.bind(arg.arg, ("type", frozenset({VAL})))
            if arg.arg in defaults:
                scope.bind(arg.arg, ("expr", defaults[arg.arg]))
        first = (node.args.posonlyargs + node.args.args)[:1]
        if owner is not None and first and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kind = self._first_parameter(node, owner)
            if kind is not None:
                scope.names[first[0].arg] = [(("type", frozenset({kind})), scope)]
        if isinstance(node, ast.Lambda):
            return scope
        bind_block(scope, node.body)
        for name in scope.globals:
            scope.names.pop(name, None)
        return scope

    def _first_parameter(self, node, class_scope):
        """What a method's first parameter is: an instance of its class, the class, an autograd.Function's ctx."""
        cls = class_scope.owner
        decorators = {d.id for d in node.decorator_list if isinstance(d, ast.Name)}
        if "staticmethod" in decorators:
            new_style = node.name == "forward" and any(
                isinstance(part, ast.FunctionDef) and part.name == "setup_context" for part in cls.node.body)
            return CTX if node.name in CTX_METHODS and not new_style and self._is_function_class(cls) else None
        if "classmethod" in decorators:
            return cls
        return Inst(cls)

    def _is_function_class(self, cls) -> bool:
        import torch
        for base in cls.node.bases:
            for kind in self.types(base, cls.scope):
                if isinstance(kind, Obj) and isinstance(resolve(kind.path), type) and \
                        issubclass(resolve(kind.path), torch.autograd.Function):
                    return True
                if isinstance(kind, Own) and isinstance(kind.node, ast.ClassDef) and self._is_function_class(kind):
                    return True
        return False

    def visit_ClassDef(self, node):
        for child in [*node.decorator_list, *node.bases, *[k.value for k in node.keywords]]:
            self.visit(child)
            self.no_module(child)
        for base in node.bases:
            if any(isinstance(t, Unknown) or t in (VAL, CTX) for t in self.types(base, self.scope)):
                self.report(base, f"`{_shown(base)}` as a base class: the judge cannot tell what it is; name the "
                                  "class directly", "unreadable")
        own = Own(node, self.scope, self.scope.course)
        scope = Scope("class", self.scope, owner=own, course=self.scope.course)
        bind_block(scope, node.body)
        saved = self.scope
        self.scope = scope
        try:
            for part in node.body:
                self.visit(part)
        finally:
            self.scope = saved

    def _comprehension(self, node):
        scope = Scope("comprehension", self.scope, course=self.scope.course)
        self.visit(node.generators[0].iter)
        for generator in node.generators:
            for name, binding in _target_bindings(generator.target, generator.iter, "elements"):
                scope.bind(name, binding)
        saved = self.scope
        self.scope = scope
        try:
            for i, generator in enumerate(node.generators):
                if i:
                    self.visit(generator.iter)
                for condition in generator.ifs:
                    self.visit(condition)
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self.visit(part)
        finally:
            self.scope = saved

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Global(self, node):
        pass


def _arguments(args):
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


def _data_or(found, why) -> frozenset:
    """`found` where every part is data; else what the judge cannot tell (a module or a function may be there)."""
    return found if all(_is_data(t) for t in found) else frozenset({Unknown(why)})


def _shown(node) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_kernel(found) -> bool:
    return any(isinstance(t, Obj) and t.path.startswith("triton") and t.path.rsplit(".", 1)[-1] in (
        "jit", "autotune", "heuristics") for t in found)
