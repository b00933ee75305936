"""The notebook's `serve.run` calls -> the apps of rayservice.yaml, importable from notebook.py.

Serve imports an app by its import path (`package.notebook:app`) on the RayService's
cluster, so the app must be a module-level name of notebook.py whose definition runs
nothing: importing notebook.py must neither run the pipeline nor deploy. `Model.bind()`
qualifies (it describes the app; the deployment's code runs in its replicas), when its
arguments are literals, imports, module-level functions and classes, or other such apps.
So the one assignment of the app (`app = Model.bind()`) moves from the step to the module's
top level, and an app given as an expression (`serve.run(Model.bind())`) gets a name
there. An app that reads a value the cells compute (or a parameter) cannot be defined at
import without running the cells: it is left out of the manifest, with the reason.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import replace

from .model import Analysis, ServeApp, ServeRefusal, Stmt
from .serve_calls import DEPLOYS, ServeAliases, ServeCall

DEFAULT_APP = "default"  # serve.run's own default name and route prefix
DEFAULT_ROUTE = "/"
_RUN_POSITIONS = ("target", "blocking", "name", "route_prefix")  # serve.run's signature
_APP_METHODS = frozenset({"bind", "options"})  # Deployment.options(...).bind(...)
_UNSET = object()


class _Refused(Exception):
    """Why a `serve.run`'s app is left out of rayservice.yaml."""


def resolve_apps(a: Analysis, aliases: ServeAliases) -> None:
    """Fill `a.serve_apps` and `a.serve_refused` from `a.serve_calls`; move or add the
    apps' assignments to the module's top level (Stmt kind "app")."""
    runs: list[tuple[ServeCall, str, str | None, ast.expr]] = []
    for c in a.serve_calls:
        if c.function != "run":
            if not c.function and aliases.function(c.call) == "run":
                _refuse(a, c, "called inside an expression; call serve.run(app) on a line "
                        "of its own")  # fmt: skip
            continue
        try:
            runs.append((c, *_arguments(c)))
        except _Refused as exc:
            _refuse(a, c, str(exc))
    kept = _one_per_name_and_route(a, runs)
    module_names = {n for s in a.stmts if s.kind == "import" for n in s.binds}
    module_names |= {s.name for s in a.stmts if s.kind == "def" and s.module_level and s.name}
    bound = Counter(n for s in a.stmts for n in s.binds)
    bound.update(p.name for p in a.params)
    taken = {n for s in a.stmts for n in s.binds | s.loads} | {p.name for p in a.params}
    for c, name, route, target in kept:
        try:
            variable = _module_level(a, c, target, module_names, bound, taken, aliases)
        except _Refused as exc:
            _refuse(a, c, str(exc))
            continue
        module_names.add(variable)
        a.serve_apps.append(ServeApp(c.cell, c.line, name, route, variable))


def _refuse(a: Analysis, c: ServeCall, why: str) -> None:
    a.serve_refused.append(ServeRefusal(c.cell, c.line, c.written, why))
    # The call's line in the table of what was left out says where its app went.
    for i, n in enumerate(a.notes):
        if (n.cell, n.line) == (c.cell, c.line) and n.why.startswith(DEPLOYS):
            a.notes[i] = replace(n, why=f"{DEPLOYS}; it is not in rayservice.yaml: {why}")


def _arguments(c: ServeCall) -> tuple[str, str | None, ast.expr]:
    """(name, route_prefix, target) of a serve.run call, checked as Serve checks them."""
    call = c.call
    given: dict[str, ast.expr] = {}
    if any(isinstance(x, ast.Starred) for x in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        raise _Refused("its arguments are given with * or **; spell out the app, name= and "
                       "route_prefix=")  # fmt: skip
    for position, value in zip(_RUN_POSITIONS, call.args, strict=False):
        given[position] = value
    for k in call.keywords:
        if k.arg is not None:
            given[k.arg] = k.value
    if "target" not in given:
        raise _Refused("it names no app")
    name = _literal(given.get("name"), "name", DEFAULT_APP)
    route = _literal(given.get("route_prefix"), "route_prefix", DEFAULT_ROUTE)
    if not isinstance(name, str) or not name:
        raise _Refused("its name= is empty or None; Serve needs an app name")
    if not name.isprintable():
        raise _Refused(f"its app name {name!r} has control or unprintable characters")
    if route is not None:
        assert isinstance(route, str)
        problem = route_prefix_problem(route)
        if problem:
            raise _Refused(f"route_prefix {route!r} {problem}")
    return name, route, given["target"]


def route_prefix_problem(route: str) -> str | None:
    """What is wrong with a route prefix, as Serve's own schema checks it (and no control
    characters: the prefix is a URL path)."""
    if not route.startswith("/"):
        return 'does not start with "/"'
    if not route.isprintable() or any(ch.isspace() for ch in route):
        return "has control, unprintable or blank characters"
    if len(route) > 1 and route.endswith("/"):
        return 'ends with "/" (only the prefix "/" itself may)'
    if "{" in route or "}" in route:
        return 'has "{" or "}" (Serve takes no wildcards)'
    return None


def _literal(node: ast.expr | None, what: str, default: str) -> str | None:
    if node is None:
        return default
    value = node.value if isinstance(node, ast.Constant) else _UNSET
    if value is None or isinstance(value, str):
        return value
    raise _Refused(f"its {what}= is not a literal string ({ast.unparse(node)})")


def _one_per_name_and_route(
    a: Analysis, runs: list[tuple[ServeCall, str, str | None, ast.expr]]
) -> list[tuple[ServeCall, str, str | None, ast.expr]]:
    """As in Serve: a later serve.run of an app name replaces the earlier app; two apps on
    one route prefix cannot both be deployed (the later one is refused)."""
    last = {name: c for c, name, _route, _target in runs}
    kept = []
    routes: dict[str, str] = {}
    for c, name, route, target in runs:
        if last[name] is not c:
            later = last[name]
            _refuse(a, c, f"replaced by the app of the same name {name!r} in cell "
                    f"{later.cell}, line {later.line}")  # fmt: skip
            continue
        if route is not None and route in routes:
            _refuse(a, c, f"route_prefix {route!r} is already the app {routes[route]!r}'s")
            continue
        if route is not None:
            routes[route] = name
        kept.append((c, name, route, target))
    return kept


def _module_level(
    a: Analysis,
    c: ServeCall,
    target: ast.expr,
    module_names: set[str],
    bound: Counter[str],
    taken: set[str],
    aliases: ServeAliases,
) -> str:
    """The module-level name of the app: its assignment moved there, or a new one."""
    if c.in_function:
        raise _Refused("called inside a function, whose app is known only when it runs")
    if isinstance(target, ast.Name):
        variable = target.id
        if variable in {d.name for d in a.stmts if d.kind == "def"}:
            raise _Refused(f"{variable} is a deployment, not an app: serve.run takes "
                           f"{variable}.bind()")  # fmt: skip
        if variable in module_names:
            return variable  # an import, or an app already at the top (deployed twice)
        if bound[variable] != 1:
            raise _Refused(f"{variable} is assigned {bound[variable]} times (or is a "
                           "parameter); assign the app once: app = Model.bind()")  # fmt: skip
        stmt = next(s for s in a.stmts if variable in s.binds)
        value = _assigned(stmt, variable)
        _check_importable(a, value, module_names, aliases, stmt)
        stmt.kind = "app"
        return variable
    _check_importable(a, target, module_names, aliases, None)
    variable = _fresh_name(taken)
    taken.add(variable)
    assign = ast.Assign(targets=[ast.Name(variable, ast.Store())], value=target, lineno=1)
    source = ast.unparse(ast.fix_missing_locations(assign))
    a.stmts.append(
        Stmt(c.cell, c.line, "app", source, a.steps[0], binds=frozenset({variable}),
             loads=frozenset(n.id for n in ast.walk(target) if isinstance(n, ast.Name)))
    )  # fmt: skip
    return variable


def _assigned(stmt: Stmt, variable: str) -> ast.expr:
    tree = ast.parse(stmt.source)
    node = tree.body[0] if len(tree.body) == 1 else None
    if (
        stmt.kind == "code"
        and isinstance(node, ast.Assign | ast.AnnAssign)
        and node.value is not None
        and [ast.unparse(t) for t in _assign_targets(node)] == [variable]
    ):
        return node.value
    raise _Refused(f"{variable} is not assigned on a line of its own (app = Model.bind()) "
                   f"in cell {stmt.cell}")  # fmt: skip


def _assign_targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def _check_importable(
    a: Analysis, value: ast.expr, module_names: set[str], aliases: ServeAliases, stmt: Stmt | None
) -> None:
    """Defining `value` at import runs nothing of the notebook's: only `.bind()` and
    `.options()` calls (and `serve.deployment(...)`) on module-level names and literals."""
    where = f" (cell {stmt.cell})" if stmt else ""
    staying = {s.name for s in a.stmts if s.kind == "def" and not s.module_level}
    for node in ast.walk(value):
        if isinstance(node, ast.Call):
            f = node.func
            method = isinstance(f, ast.Attribute) and f.attr in _APP_METHODS
            deployment = (
                isinstance(f, ast.Attribute)
                and f.attr == "deployment"
                and aliases.is_serve(f.value)
            )
            if not (method or deployment):
                raise _Refused(f"the app{where} calls {ast.unparse(f)}(), which would run "
                               "when notebook.py is imported; only Deployment.bind() and "
                               ".options() may")  # fmt: skip
        elif isinstance(node, ast.Name) and node.id in staying:
            raise _Refused(f"the app{where} binds {node.id}, which reads values the cells "
                           "compute and so is defined inside the step, not at import")  # fmt: skip
        elif isinstance(node, ast.Name) and node.id not in module_names:
            raise _Refused(f"the app{where} reads {node.id}, which the cells compute when "
                           "the pipeline runs (a Serve app must be defined at import: "
                           "bind it to literals, imports and top-level functions or "
                           "classes)")  # fmt: skip
        elif isinstance(node, ast.Lambda | ast.NamedExpr | ast.Await | ast.Yield
                        | ast.YieldFrom | ast.comprehension):  # fmt: skip
            raise _Refused(f"the app{where} is not a plain Model.bind(...) expression")


def _fresh_name(taken: set[str]) -> str:
    name, n = "serve_app", 1
    while name in taken:
        n += 1
        name = f"serve_app_{n}"
    return name
