"""The notebook's code as a Python module that Ray workers can import.

Only imports and self-contained functions and classes sit at the module's top level
(importing it runs no notebook code, so validation and Ray workers may import it). The
rest runs, in notebook order, inside one function per step (`run` when there are no
steps), which the Dagster asset calls once its Ray resource is connected.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .model import Analysis, Stmt
from .templating import py_repr, render

INDENT = "    "


@dataclass(frozen=True)
class StepPlan:
    step: str
    asset: str
    function: str
    cells: tuple[int, ...]
    takes: tuple[str, ...]  # names unpacked from the previous step's output
    gives: tuple[str, ...]  # names this step hands to the next (empty for the last)
    first: bool
    final: bool


@dataclass(frozen=True)
class Module:
    source: str
    steps: list[StepPlan]


def build_module(a: Analysis, pipeline: str, notebook: str) -> Module:
    taken = {n for s in a.stmts for n in s.binds} | {p.name for p in a.params}
    show, result, carried = (_fresh(n, taken) for n in ("_show", "_result", "_carried"))
    no_show = _fresh("_no_show", taken)
    single = len(a.steps) == 1
    functions = {
        step: _fresh("run" if single else f"run_{step}", taken | {show, result, carried})
        for step in a.steps
    }
    plans = _plan(a, pipeline, functions)
    imports = [s for s in a.stmts if s.kind == "import"]
    future = [s for s in imports if s.source.lstrip().startswith("from __future__")]
    import_lines = [
        f"{s.source}  # cell {s.cell}" if "\n" not in s.source else s.source
        for s in [*future, *(s for s in imports if s not in future)]
    ]
    blocks = [_docstring(notebook, a)]
    if import_lines:
        blocks.append("\n".join(import_lines))
    blocks.append(
        f"def {no_show}(label, value):\n"
        f'{INDENT}"""Where a step reports what a cell showed; the asset records it as '
        'metadata."""'
    )
    blocks += [f"# cell {s.cell}\n{s.source}" for s in a.stmts
               if s.kind == "def" and s.module_level]  # fmt: skip
    apps = [s for s in a.stmts if s.kind == "app"]
    if apps:  # after the defs: an app binds the deployments defined above it
        blocks.append(
            "# The Serve apps rayservice.yaml deploys (Serve imports them from here).\n"
            "# Binding a deployment describes the app: it runs none of its code.\n"
            + "\n".join(f"# cell {s.cell}\n{s.source}" for s in apps)
        )
    blocks += [_function(a, plan, show, result, carried, no_show) for plan in plans]
    # The docstring and the imports are one blank line apart; everything else two.
    source = blocks[0] + "\n" + "\n\n\n".join(blocks[1:]) + "\n"
    return Module(source, plans)


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def _docstring(notebook: str, a: Analysis) -> str:
    # Through the templates' environment: the file name is the user's text, escaped there.
    return render("notebook_docstring.py.j2", notebook=notebook,
                  serve=any(s.kind == "app" for s in a.stmts))  # fmt: skip


def _plan(a: Analysis, pipeline: str, functions: dict[str, str]) -> list[StepPlan]:
    body = [s for s in a.stmts if s.kind in ("code", "show") or (s.kind == "def"
            and not s.module_level)]  # fmt: skip
    steps = a.steps
    needs: dict[str, set[str]] = {}
    bound_before: set[str] = set()
    defs_before: set[str] = set()
    for step in steps:
        own = [s for s in body if s.step == step]
        loads = set().union(*(s.loads for s in own)) | set(_prelude_loads(a, step, body))
        needs[step] = (loads & bound_before) - defs_before
        for s in own:
            bound_before |= s.binds
            if s.kind == "def" and s.name:
                defs_before.add(s.name)
    plans: list[StepPlan] = []
    later: set[str] = set()
    gives: dict[str, set[str]] = {}
    for step in reversed(steps):
        own_binds = set().union(*(s.binds for s in body if s.step == step))
        gives[step] = set(later)
        later = (later - own_binds) | needs[step]
    for i, step in enumerate(steps):
        own_binds = set().union(*(s.binds for s in body if s.step == step))
        takes = needs[step] | (gives[step] - own_binds) if i else set()
        plans.append(
            StepPlan(
                step=step,
                asset=pipeline if len(steps) == 1 else step,
                function=functions[step],
                cells=tuple(sorted({s.cell for s in a.stmts if s.step == step})),
                takes=tuple(sorted(takes)),
                gives=tuple(sorted(gives[step])) if i < len(steps) - 1 else (),
                first=i == 0,
                final=i == len(steps) - 1,
            )
        )
    return plans


def _prelude(a: Analysis, step: str, body: list[Stmt]) -> list[Stmt]:
    """Functions that stay in an earlier step's body but this step calls: defined again
    here (a function is code, not data to hand over between steps)."""
    earlier = []
    for s in body:
        if s.step == step:
            break
        earlier.append(s)
    defs = {s.name: s for s in earlier if s.kind == "def" and s.name}
    wanted: list[Stmt] = []
    loads = set().union(*(s.loads for s in body if s.step == step))
    changed = True
    while changed:
        changed = False
        for name, d in defs.items():
            if name in loads and d not in wanted:
                wanted.append(d)
                loads |= d.loads
                changed = True
    return sorted(wanted, key=lambda s: (s.cell, s.line))


def _prelude_loads(a: Analysis, step: str, body: list[Stmt]) -> set[str]:
    return set().union(*(d.loads for d in _prelude(a, step, body)))


def _function(a: Analysis, plan: StepPlan, show: str, result: str, carried: str,
              no_show: str) -> str:  # fmt: skip
    body_stmts = [s for s in a.stmts if s.kind in ("code", "show") or (s.kind == "def"
                  and not s.module_level)]  # fmt: skip
    own = [s for s in body_stmts if s.step == plan.step]
    prelude = _prelude(a, plan.step, body_stmts)
    args = [] if plan.first else [carried, "*"]
    args += ([] if args else ["*"]) + [f"{p.name}: {p.annotation} = {py_repr(p.value)}"
                                       for p in a.params]  # fmt: skip
    args.append(f"{show}={no_show}")
    signature = f"def {plan.function}({', '.join(args)}):"
    if len(signature) > 88:
        signature = f"def {plan.function}(\n" + "".join(f"{INDENT}{x},\n" for x in args) + "):"
    cells = _ranges(plan.cells)
    returns = (
        "returns the value the last of them showed"
        if plan.final
        else "returns the values later steps use"
    )
    which = f"Cell {cells}" if len(plan.cells) == 1 else f"Cells {cells}"
    lines = [signature, f'{INDENT}"""{which} of the notebook; {returns}."""']
    lines.append(f"{INDENT}{result} = None")
    for name in plan.takes:
        lines.append(f"{INDENT}{name} = {carried}[{py_repr(name)}]")
    local = set(plan.takes) | set().union(*(s.binds for s in own)) | {p.name for p in a.params}
    cell = 0
    for s in [*prelude, *own]:
        if s.cell != cell:
            lines += ["", f"{INDENT}# cell {s.cell}"]
            cell = s.cell
        if s.kind == "show":
            label = s.source.strip().splitlines()[0]
            label = label if len(label) <= 60 else label[:59] + "…"
            if "\n" in s.source.strip():
                inner = _indent(s.source.strip(), INDENT)
                lines.append(_indent(f"{result} = (\n{inner}\n)", INDENT))
            else:
                lines.append(f"{INDENT}{result} = {s.source.strip()}")
            lines.append(f"{INDENT}{show}({py_repr(label)}, {result})")
        elif s.kind == "def":
            lines.append(_indent(_nonlocal(s.source, local), INDENT))
        else:
            lines.append(_indent(s.source, INDENT))
    lines.append("")
    if plan.final:
        lines.append(f"{INDENT}return {result}")
    else:
        pairs = ", ".join(f"{py_repr(n)}: {n}" for n in plan.gives)
        lines.append(f"{INDENT}return {{{pairs}}}")
    return "\n".join(lines)


def _ranges(cells: tuple[int, ...]) -> str:
    parts: list[str] = []
    for c in cells:
        if parts and "-" not in parts[-1] and int(parts[-1]) == c - 1:
            parts[-1] = f"{parts[-1]}-{c}"
        elif parts and "-" in parts[-1] and int(parts[-1].split("-")[1]) == c - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        else:
            parts.append(str(c))
    return ", ".join(parts)


def _indent(source: str, prefix: str) -> str:
    """Indent code, leaving alone the inside of multi-line strings (their text)."""
    inside: set[int] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            text = isinstance(node, ast.JoinedStr) or (
                isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
            )
            if text and isinstance(node, ast.expr) and (node.end_lineno or 0) > node.lineno:
                inside.update(range(node.lineno + 1, (node.end_lineno or 0) + 1))
    return "\n".join(
        line if (n in inside or not line.strip()) else prefix + line
        for n, line in enumerate(source.split("\n"), start=1)
    )


def _nonlocal(source: str, local: set[str]) -> str:
    """In a function moved into a step, `global x` for a step variable becomes `nonlocal x`:
    in the notebook x was a top-level variable, in the pipeline it is the step's."""
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return source
    lines = source.split("\n")
    for sub in _direct_statements(node):
        if isinstance(sub, ast.Global) and set(sub.names) <= local:
            row = lines[sub.lineno - 1]
            col = sub.col_offset
            if row[col : col + 6] == "global":
                lines[sub.lineno - 1] = row[:col] + "nonlocal" + row[col + 6 :]
    return "\n".join(lines)


def _direct_statements(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """Statements of `fn` at any depth, not inside a nested function or class."""
    found: list[ast.stmt] = []
    todo: list[ast.stmt] = list(fn.body)
    while todo:
        s = todo.pop()
        found.append(s)
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.stmt):
                todo.append(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                todo.extend(child.body)
    return found
