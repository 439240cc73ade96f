"""Read a submitted notebook's code as code, never running it: for the flags.

`Reader` walks code of a notebook (`autograder.grader.notebook_code`) and follows every name to what
it stands for: a definition of the notebook, a module, or an attribute chain on a module
(`torch.autograd.grad`, however it was imported or renamed, `torch.nn.functional.torch.autograd.grad`
included: chains are looked up on the real modules, here in the grader, and compared by identity).
It reports, as `Finding`s, what no honest answer needs and what the judge cannot follow: reflection (computed
`getattr`, `exec`, `importlib`, frames, `sys.modules`, `gc`, ...), private parts of a library
(`torch._C`), stores on a module (a patch), modules it does not read. What it does not follow:
values handed to a function as arguments (a parameter is whatever the caller passes). The by-hand
judge reads answers another way, as an allow-list (`autograder.grader.answer_reading`).
"""
import ast
import builtins
import re
import types

from autograder.grader.notebook_code import (
    KNOWN_MODULES,
    UNKNOWN,
    Builtin,
    Cell,
    Definition,
    Finding,
    NotebookCode,
    Path,
    Scope,
    canonical,
    constant_getattr,
    installed,
    lookup,
    magic,
    parse_cell,
)

# Modules that reflect, patch or load code by name: a use of any is refused, wherever it is.
DENIED_MODULES = {
    "importlib": "loads modules by computed names", "builtins": "replaces Python's own functions",
    "gc": "finds any object in memory", "ctypes": "reaches memory directly", "inspect": "reads frames and source",
    "marshal": "builds code objects", "pickle": "runs code while it loads", "copyreg": "changes how objects copy",
    "dill": "runs code while it loads", "cloudpickle": "runs code while it loads", "code": "runs code from strings",
    "codeop": "compiles code from strings", "dis": "reads code objects", "runpy": "runs modules by name",
    "threading": "sets hooks on every thread", "signal": "changes the grader's time limits",
    "IPython": "changes how cells run", "ipykernel": "reaches the kernel", "jupyter_client": "reaches the kernel",
    "zmq": "reaches the kernel's sockets", "linecache": "rewrites source", "traceback": "reads frames",
    "functorch": "is torch.func under another name", "weakref": "finds objects without names",
    "site": "changes the import path", "sysconfig": "reads the install",
    "unittest": "patches objects by name (mock)", "pydoc": "finds objects by computed names",
    "shelve": "runs code while it loads", "joblib": "runs code while it loads"}
# Attributes of a known module that are reflection, or a hook on the interpreter.
DENIED_ATTRIBUTES = {
    "sys": {"modules", "meta_path", "path_hooks", "path_importer_cache", "settrace", "setprofile", "gettrace",
            "getprofile", "addaudithook", "monitoring", "last_traceback", "last_value", "last_exc", "excepthook",
            "displayhook", "call_tracing", "breakpointhook", "audit"},
    "types": {"FunctionType", "CodeType", "LambdaType", "MethodType", "FrameType", "ModuleType", "CellType",
              "TracebackType", "new_class", "BuiltinFunctionType", "GeneratorType", "coroutine"},
    "operator": {"attrgetter", "methodcaller"},
}
# Private names that are a public API in all but name (PyTorch's own reentrant checkpoint asks the first).
ALLOWED_PRIVATE = {"torch.autograd._is_checkpoint_valid", "os._exit"}
# Built-in functions that reach objects by computed names, or run strings as code.
REFLECTIVE_BUILTINS = {"getattr", "setattr", "delattr", "vars", "globals", "locals", "eval", "exec", "compile",
                       "__import__", "breakpoint", "__build_class__"}
# Attributes that walk from an object to frames, code, namespaces or every class: none is on any path an
# answer needs, on any object.
DENIED_DUNDERS = {"__dict__", "__globals__", "__code__", "__closure__", "__subclasses__", "__bases__", "__base__",
                  "__mro__", "__builtins__", "__getattribute__", "__getattr__", "__setattr__", "__delattr__",
                  "__wrapped__", "__reduce__", "__reduce_ex__", "__import__", "__loader__", "__spec__", "__self__",
                  "__func__", "__defaults__", "__kwdefaults__", "__module__", "__objclass__", "__subclasshook__",
                  "__init_subclass__", "__set_name__", "__class_getitem__", "__annotations__", "__traceback__",
                  "__context__", "__cause__"}
FRAME_ATTRIBUTES = {"f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
                    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "co_code", "co_consts",
                    "co_names", "co_varnames", "cell_contents"}
# IPython puts these in every namespace: the shell itself, and every earlier input and output (an
# output may be a function a cell showed, `torch.autograd.grad` itself).
IPYTHON_NAMES = re.compile(r"^(get_ipython|In|Out|_oh|_ih|_dh|_ii*|_i\d+|_+|_\d+|exit|quit)$")
# Magics whose argument is Python code run in the notebook: read it as such.
CODE_MAGICS = {"time", "timeit", "prun", "capture"}
# Magics that run nothing of the notebook's.
QUIET_MAGICS = {"matplotlib", "config", "env", "pwd", "ls", "who", "whos", "who_ls", "precision", "pinfo", "pinfo2",
                "pdoc", "pdef", "psource", "pfile", "page", "pip", "conda", "lsmagic", "magic", "history", "xmode",
                "colors", "notebook", "ddir", "dhist", "bookmark", "cd", "pprint", "automagic", "timeit_quiet"}


# --- reading code ---------------------------------------------------------------------------------
class Reader(ast.NodeVisitor):
    """Walk code of a notebook and report what it reaches (`findings`) and which of the notebook's own
    definitions it uses (`reached`), following names through imports, assignments and attribute chains."""

    def __init__(self, code: NotebookCode):
        self.code = code
        self.findings, self.reached = [], []
        self.cell, self.scope = None, None
        self._resolving = set()

    # -- entry point
    def read_cell(self, cell):
        """Every line of a cell, function bodies included."""
        self._in(cell, None, lambda: [self.visit(s) for s in cell.tree.body])

    def _in(self, cell, scope, work):
        saved = self.cell, self.scope
        self.cell, self.scope = cell, scope
        try:
            work()
        finally:
            self.cell, self.scope = saved

    def _with_scope(self, scope, work):
        saved = self.scope
        self.scope = scope
        try:
            work()
        finally:
            self.scope = saved

    def report(self, node, what, kind="reflection"):
        self.findings.append(Finding(self.cell.site(node), what, kind, self.cell.lines_of(node)))

    # -- what names and expressions stand for
    def name_refs(self, name) -> set:
        scope = self.scope
        while scope is not None:
            if name in scope.globals:
                break
            if name in scope.names and not (scope.is_class and scope is not self.scope):
                found = set()
                for value in scope.names[name]:
                    if isinstance(value, tuple):
                        found.add(Path(value[1]) if value[0] == "import" else UNKNOWN)
                    elif value is None:
                        found.add(UNKNOWN)
                    else:
                        found |= self._resolve_in(value, scope)
                return found
            scope = scope.parent
        return self.module_refs(name)

    def module_refs(self, name) -> set:
        found = set()
        for binding in self.code.bindings.get(name, ()):
            if isinstance(binding, Definition):
                if binding not in self.reached:
                    self.reached.append(binding)
                if binding.kind == "value":
                    found |= self._resolve_in(binding.node, None) if binding.node is not None else {UNKNOWN}
                else:
                    found.add(binding)
            elif binding[0] == "import":
                found.add(Path(binding[1]))
        if not found:
            for star in self.code.bindings.get("*", ()):
                if lookup(f"{star[1]}.{name}") is not None or star[1].split(".")[0] not in KNOWN_MODULES:
                    found.add(Path(f"{star[1]}.{name}"))
        if not found and name in vars(builtins):
            found.add(Builtin(name))
        return found or {UNKNOWN}

    def _resolve_in(self, node, scope) -> set:
        key = (id(node), id(scope))
        if key in self._resolving:
            return {UNKNOWN}
        self._resolving.add(key)
        try:
            saved = self.scope
            self.scope = scope
            try:
                return self.refs(node)
            finally:
                self.scope = saved
        finally:
            self._resolving.discard(key)

    def refs(self, node) -> set:
        if isinstance(node, ast.Name):
            return self.name_refs(node.id)
        if isinstance(node, ast.Attribute):
            return {r.attribute(node.attr) if isinstance(r, Path) else UNKNOWN for r in self.refs(node.value)}
        constant = constant_getattr(node)
        if constant is not None:
            return {r.attribute(constant[1]) if isinstance(r, Path) else UNKNOWN for r in self.refs(constant[0])}
        return {UNKNOWN}

    # -- checks
    def check_path(self, path: str, node):
        parts = path.split(".")
        top = parts[0]
        if top in DENIED_MODULES:
            return self.report(node, f"uses {top}, which {DENIED_MODULES[top]}")
        if top == "__future__" or (top not in KNOWN_MODULES and installed(top)):
            return None  # a library of the environment, used outside an answer: its code is not the student's
        if top.startswith("_") or top not in KNOWN_MODULES:
            return self.report(node, f"imports {top or path}, a module the judge does not read (it reads "
                                     f"{', '.join(sorted(KNOWN_MODULES - {'autograder'}))})")
        for i, part in enumerate(parts[1:], start=1):
            if part in DENIED_DUNDERS or part in FRAME_ATTRIBUTES:
                return self.report(node, f"reaches {'.'.join(parts[:i + 1])}, which walks to code, frames or "
                                         "namespaces")
            if part.startswith("_") and not (part.startswith("__") and part.endswith("__")) \
                    and canonical(".".join(parts[:i + 1])) not in ALLOWED_PRIVATE:
                return self.report(node, f"reaches {'.'.join(parts[:i + 1])}, a private part of {top}")
        full = canonical(path)
        module, _, attribute = full.rpartition(".")
        for denied_module, names in DENIED_ATTRIBUTES.items():
            if attribute in names and (module == denied_module or canonical(module) == denied_module):
                return self.report(node, f"reaches {denied_module}.{attribute}, reflection the judge cannot follow")
        if top == "autograder" and len(parts) > 1 and parts[1] == "grader":
            return self.report(node, "uses autograder.grader, the instructor's grader (its answer keys)", "answers")

    def check_refs(self, refs, node):
        for ref in refs:
            if isinstance(ref, Path):
                self.check_path(ref.dotted, node)

    # -- the walk
    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            if node.id in ("__module__", "__qualname__") and self.scope is not None and self.scope.is_class:
                self.report(node, f"sets a class's {node.id}", "store")
            return
        if isinstance(node.ctx, ast.Del):
            return
        refs = self.name_refs(node.id)
        if refs == {UNKNOWN} and not self._bound_anywhere(node.id) and IPYTHON_NAMES.match(node.id):
            self.report(node, f"uses IPython's {node.id}, which reaches the kernel and every earlier cell")
        for ref in refs:
            if isinstance(ref, Builtin) and ref.name in REFLECTIVE_BUILTINS:
                self.report(node, f"uses {ref.name}, which reaches objects or code by computed names")
            elif isinstance(ref, Builtin) and ref.name == "__builtins__":
                self.report(node, "uses __builtins__")
        self.check_refs(refs, node)

    def _bound_anywhere(self, name):
        scope = self.scope
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return name in self.code.bindings

    def visit_Constant(self, node):
        if isinstance(node.value, str) and ("solutions/" in node.value or "answer_key" in node.value):
            self.report(node, "names the course's solutions or answer keys", "answers")

    def visit_Attribute(self, node):
        self.visit(node.value)
        if node.attr in DENIED_DUNDERS or node.attr in FRAME_ATTRIBUTES:
            return self.report(node, f"reaches .{node.attr}, which walks to code, frames or namespaces")
        receivers = self.refs(node.value)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            patched = [r for r in receivers if isinstance(r, Path) and not _configurable(r.dotted)]
            if patched:
                verb = "deletes" if isinstance(node.ctx, ast.Del) else "changes"
                self.report(node, f"{verb} {canonical(patched[0].dotted)}.{node.attr}", "store")
            return
        if any(isinstance(r, Path) for r in receivers):
            self.check_refs({r.attribute(node.attr) for r in receivers if isinstance(r, Path)}, node)

    def visit_Call(self, node):
        found = magic(node)
        if found is not None:
            return self._magic(node, *found)
        constant = constant_getattr(node)
        if constant is not None:  # getattr(x, "name"): an attribute written another way
            return self.visit(ast.copy_location(ast.Attribute(constant[0], constant[1], ast.Load()), node))
        self.visit(node.func)
        for argument in [*node.args, *[k.value for k in node.keywords]]:
            self.visit(argument)
            self._not_a_module(argument)

    def _magic(self, node, kind, name, code):
        if kind == "shell" or name in QUIET_MAGICS:
            return
        if name in CODE_MAGICS and code is not None:
            tree = parse_cell(code)
            if tree is None:
                return
            shift = self.cell.offset + node.lineno - (0 if kind == "cell" else 1)
            inner = Cell(self.cell.number, self.cell.source, tree, self.cell.test, shift)
            saved = self.cell
            self.cell = inner
            try:
                for statement in tree.body:
                    self.visit(statement)
            finally:
                self.cell = saved
            return
        what = f"runs the magic %{name}" if kind in ("line", "cell") else f"uses IPython's get_ipython().{name}"
        self.report(node, f"{what}, which runs code the judge cannot read")

    def _not_a_module(self, node):
        """A module handed to a function or stored in a container goes where names cannot follow it."""
        if isinstance(node, (ast.Name, ast.Attribute)):
            modules = [r for r in self.refs(node)
                       if isinstance(r, Path) and isinstance(lookup(r.dotted), types.ModuleType)]
            if modules:
                self.report(node, f"hands the module {modules[0].dotted} around, where the judge cannot follow it")

    def visit_Return(self, node):
        self.generic_visit(node)
        if node.value is not None:
            self._not_a_module(node.value)

    def visit_List(self, node):
        self.generic_visit(node)
        for element in node.elts:
            self._not_a_module(element)

    visit_Tuple = visit_Set = visit_List

    def visit_Dict(self, node):
        self.generic_visit(node)
        for value in node.values:
            self._not_a_module(value)

    def visit_Assign(self, node):
        self.generic_visit(node)
        if not all(isinstance(t, ast.Name) for t in node.targets):
            self._not_a_module(node.value)

    def visit_Import(self, node):
        for alias in node.names:
            self.check_path(alias.name, node)

    def visit_ImportFrom(self, node):
        if node.level:
            return self.report(node, "imports a module of its own, which the judge does not read")
        for alias in node.names:
            if alias.name == "*":
                self.check_path(node.module, node)
            else:
                self.check_path(f"{node.module}.{alias.name}", node)

    def visit_FunctionDef(self, node):
        for child in [*node.decorator_list, *node.args.defaults, *[d for d in node.args.kw_defaults if d]]:
            self.visit(child)
        self._with_scope(Scope(node, self._function_parent()), lambda: [self.visit(s) for s in node.body])

    visit_AsyncFunctionDef = visit_FunctionDef

    def _function_parent(self):
        scope = self.scope
        while scope is not None and scope.is_class:  # a method does not see its class body's names
            scope = scope.parent
        return scope

    def visit_Lambda(self, node):
        for child in [*node.args.defaults, *[d for d in node.args.kw_defaults if d]]:
            self.visit(child)
        self._with_scope(Scope(node, self._function_parent()), lambda: self.visit(node.body))

    def visit_ClassDef(self, node):
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(child)
        self._with_scope(Scope(node, self.scope), lambda: [self.visit(s) for s in node.body])

    def _comprehension(self, node):
        self._with_scope(Scope(node, self.scope), lambda: self.generic_visit(node))

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension


def _configurable(path: str) -> bool:
    """Settings a notebook may change: torch's backend switches (cudnn, matmul precision)."""
    return canonical(path).startswith("torch.backends")
