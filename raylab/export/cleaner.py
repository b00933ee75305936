"""Removing, at any depth, what a pipeline must not run: magics, Ray's lifecycle, display.

Each removal is noted (cell, line, what was written, why) for EXPORT.md.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from .env_writes import RUN_TIME_NAME, EnvAliases, EnvWrite, bound_names, env_write
from .magic_lines import decide, ipython_call, uses_ipython
from .model import Analysis
from .serve_calls import DEPLOYING, DEPLOYS, ServeAliases, ServeCall

# Libraries that only draw or display: their imports and the statements using them go.
_DISPLAY_MODULES = frozenset(
    {"IPython", "matplotlib", "seaborn", "plotly", "bokeh", "altair", "ipywidgets"}
)
# `df.plot()`, `series.hist()`, `fig.show()`: display calls whatever the object.
_DISPLAY_ATTRS = frozenset({"plot", "hist", "boxplot", "imshow", "show"})
_RAY_LIFECYCLE = frozenset({"init", "shutdown"})
_RAY_WHY = "the pipeline's Ray resource connects (ray.init) and disconnects (ray.shutdown)"
_COMPOUND_FIELDS = ("body", "orelse", "finalbody")
_SERVE_WHY = {
    "run": f"{DEPLOYS}; the app is written to rayservice.yaml instead (see Serve apps)",
    "start": "starts Serve; the RayService in rayservice.yaml runs Serve (see Serve apps)",
    "shutdown": "stops Serve apps; the RayService in rayservice.yaml owns them",
    "delete": "stops Serve apps; the RayService in rayservice.yaml owns them",
}


@dataclass
class Names:
    """Names whose meaning matters across cells: Ray's module and display libraries."""

    ray_modules: set[str] = field(default_factory=lambda: {"ray"})
    ray_functions: set[str] = field(default_factory=set)  # from ray import init
    display: set[str] = field(default_factory=lambda: {"display"})  # a kernel builtin
    env: EnvAliases = field(default_factory=EnvAliases)  # os.environ and os.putenv
    serve: ServeAliases = field(default_factory=ServeAliases)  # ray.serve and its run

    def learn_import(self, node: ast.Import | ast.ImportFrom) -> bool:
        """Record aliases; True when the import is of a display-only library."""
        self.env.learn(node)
        self.serve.learn(node)
        if isinstance(node, ast.Import):
            roots = [a.name.split(".")[0] for a in node.names]
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if alias.name == "ray":
                    self.ray_modules.add(bound)
        else:
            roots = [(node.module or "").split(".")[0]]
            if node.module == "ray":
                self.ray_functions |= {
                    a.asname or a.name for a in node.names if a.name in _RAY_LIFECYCLE
                }
        if roots and all(r in _DISPLAY_MODULES for r in roots):
            self.display |= {(a.asname or a.name).split(".")[0] for a in node.names}
            return True
        return False

    def is_ray_lifecycle(self, node: ast.expr | None) -> bool:
        if not isinstance(node, ast.Call):
            return False
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            return f.attr in _RAY_LIFECYCLE and f.value.id in self.ray_modules
        return isinstance(f, ast.Name) and f.id in self.ray_functions

    def is_display(self, node: ast.expr | None) -> bool:
        if node is None:
            return False
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id in self.display:
                return True
        if isinstance(node, ast.Call):
            f: ast.expr = node.func
            while isinstance(f, ast.Attribute | ast.Call):
                if isinstance(f, ast.Attribute):
                    if f.attr in _DISPLAY_ATTRS:
                        return True
                    f = f.value
                else:
                    f = f.func
        return False


class Cleaner:
    """Removes what a pipeline must not run, at any depth, noting each removal."""

    def __init__(self, names: Names, analysis: Analysis, cell: int, offset: int) -> None:
        self.names = names
        self.a = analysis
        self.cell = cell
        self.offset = offset  # lines above the Python (a `%%time` line)
        self.removed = 0
        self.functions = 0  # how many defs the statement is inside

    def note(self, node: ast.stmt, written: str, action: str, why: str) -> None:
        self.a.note(self.cell, node.lineno + self.offset, written, action, why)
        self.removed += 1

    def statements(self, body: Sequence[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in body:
            out.extend(self.statement(node))
        return out

    def statement(self, node: ast.stmt) -> list[ast.stmt]:
        call = ipython_call(node.value) if isinstance(node, ast.Expr) else None
        if call is not None:
            d = decide(*call)
            self.a.add_requirements(d.requirements)
            self.a.add_env(d.env_names)
            self.a.add_written_values(d.env_values)
            action = {"keep": "changed", "dependency": "dependency"}.get(d.action, "dropped")
            self.note(node, d.written, action, d.why)
            if d.action == "keep" and d.code:
                kept = _parse_or_none(d.code)
                if kept is not None:
                    for k in kept:
                        ast.copy_location(k, node)
                        ast.fix_missing_locations(k)
                    return self.statements(kept)
            return []
        # First: every note below shows the statement as written, which must not show
        # a value written into the environment.
        write = env_write(node, self.names.env)
        if write is not None:
            self._drop_env_write(node, write)
            return []
        if isinstance(node, ast.Import | ast.ImportFrom) and self.names.learn_import(node):
            self.note(node, ast.unparse(node), "dropped", "display library")
            return []
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "ray"
            and all(a.name in _RAY_LIFECYCLE for a in node.names)
        ):
            self.note(node, ast.unparse(node), "dropped", _RAY_WHY)
            return []
        if self.names.serve.only_lifecycle_import(node):
            self.note(node, ast.unparse(node), "dropped", "imports Serve's deploying calls, "
                      "which are left out (see Serve apps)")  # fmt: skip
            return []
        value = getattr(node, "value", None)
        if isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign | ast.AugAssign):
            function = self.names.serve.function(value)
            if function is not None:
                assert isinstance(value, ast.Call)
                self._drop_serve(node, value, function)
                return []
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = _targets(node)
            if value is not None and ipython_call(value) is not None:
                why = f"shell or magic output; {targets} is not defined in the pipeline"
                self.note(node, ast.unparse(node), "dropped", why)
                return []
            if self.names.is_ray_lifecycle(value):
                self.note(node, ast.unparse(node), "dropped",
                          f"{_RAY_WHY}; {targets} is not defined in the pipeline")  # fmt: skip
                return []
            if self.names.is_display(value):
                self.names.display |= set(_target_names(node))
                self.note(node, ast.unparse(node), "dropped", "display only")
                return []
        if isinstance(node, ast.Expr):
            if self.names.is_ray_lifecycle(node.value):
                why = _RAY_WHY
                assert isinstance(node.value, ast.Call)
                if node.value.args or node.value.keywords:
                    why += "; its arguments are not carried over (see ray_init_options)"
                self.note(node, ast.unparse(node), "dropped", why)
                return []
            if self.names.is_display(node.value):
                self.note(node, ast.unparse(node), "dropped", "display only")
                return []
        before = self.removed
        self._inside(node)
        inner = self.names.serve.found_in(node)
        if inner is not None:
            # Deploying inside an expression (`if serve.run(app): ...`): all of it goes.
            self._drop_serve(node, inner, "")
            return []
        if (
            self.removed != before
            and isinstance(node, ast.Try | ast.TryStar)
            and all(isinstance(s, ast.Pass) for s in node.body)
        ):
            # Nothing left to try: the handlers can no longer run, else/finally still do.
            rest = [s for s in [*node.orelse, *node.finalbody] if not isinstance(s, ast.Pass)]
            self.note(node, "try:", "changed", "nothing left to try; its except clauses went")
            return rest
        if self.removed != before and _only_pass(node):
            self.note(node, ast.unparse(node).splitlines()[0], "dropped",
                      "nothing left once the lines above are removed")  # fmt: skip
            return []
        if uses_ipython(node):
            self.note(node, ast.unparse(node), "dropped", "uses IPython (get_ipython)")
            return []
        return [node]

    def _drop_env_write(self, node: ast.stmt, write: EnvWrite) -> None:
        known = [n for n in write.names if n != RUN_TIME_NAME]
        self.a.add_env(known)
        self.a.add_written_values(write.values)
        where = f"set {', '.join(known)}" if known else "set it"
        why = (f"sets {', '.join(write.names)} to a value written in the notebook; the value "
               f"is not copied: {where} where the pipeline runs")  # fmt: skip
        bound = bound_names(node)
        if bound:
            why += f"; {', '.join(bound)} is not defined in the pipeline"
        self.note(node, f"{', '.join(known) or 'os.environ[…]'} = …", "dropped", why)

    def _drop_serve(self, node: ast.stmt, call: ast.Call, function: str) -> None:
        written = ast.unparse(node).splitlines()[0]
        if function:
            why = _SERVE_WHY[function]
        else:
            name = self.names.serve.function(call) or "run"
            why = f"calls serve.{name} inside an expression: the whole statement is left out"
            if name in DEPLOYING:
                why += "; its app is not in rayservice.yaml (call serve.run on a line of its own)"
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            why += f"; {_targets(node)} is not defined in the pipeline"
        self.note(node, written, "dropped", why)
        self.a.serve_calls.append(
            ServeCall(self.cell, node.lineno + self.offset, written, function, call,
                      in_function=self.functions > 0)
        )  # fmt: skip

    def _inside(self, node: ast.stmt) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.functions += 1
            try:
                self._inside_bodies(node)
            finally:
                self.functions -= 1
        else:
            self._inside_bodies(node)

    def _inside_bodies(self, node: ast.stmt) -> None:
        for name in _COMPOUND_FIELDS:
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, name, self.statements(body) or [ast.Pass()])
        for handler in getattr(node, "handlers", []) or []:
            handler.body = self.statements(handler.body) or [ast.Pass()]
        for case in getattr(node, "cases", []) or []:
            case.body = self.statements(case.body) or [ast.Pass()]


def _only_pass(node: ast.stmt) -> bool:
    """A compound statement (not a def or class) whose every body is now `pass`."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return False
    bodies = [getattr(node, f, None) for f in _COMPOUND_FIELDS]
    bodies += [h.body for h in getattr(node, "handlers", []) or []]
    bodies += [c.body for c in getattr(node, "cases", []) or []]
    present = [b for b in bodies if isinstance(b, list) and b]
    return bool(present) and all(all(isinstance(s, ast.Pass) for s in b) for b in present)


def _targets(node: ast.Assign | ast.AnnAssign | ast.AugAssign) -> str:
    return ", ".join(_target_names(node)) or "its target"


def _target_names(node: ast.stmt) -> list[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [n.id for t in targets if t for n in ast.walk(t) if isinstance(n, ast.Name)]


def _parse_or_none(code: str) -> list[ast.stmt] | None:
    try:
        return ast.parse(code).body
    except SyntaxError:
        return None
