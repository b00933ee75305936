"""Ray Serve's deploying calls in a notebook, under every name the notebook gives them.

`serve.run(app)` deploys an app and returns (or, with `blocking=True`, never returns); a
pipeline step must do neither on its short-lived cluster. These calls are left out of the
step code and their apps go to a KubeRay RayService instead (serve_apps.py). Recognised:
`serve.X` after `from ray import serve [as s]` or `import ray.serve as s`, `ray.serve.X`
(any alias of `ray`), and `X` after `from ray.serve import X [as y]`, for X in `run`,
`start` (deploying) and `shutdown`, `delete` (tearing down what was deployed).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

DEPLOYING = frozenset({"run", "start"})
TEARING_DOWN = frozenset({"shutdown", "delete"})
LIFECYCLE = DEPLOYING | TEARING_DOWN
DEPLOYS = (
    "deploys a Serve app, which a pipeline step must not do (with blocking=True it never ends)"
)


@dataclass
class ServeAliases:
    """Names that mean Ray, Ray Serve or one of Serve's lifecycle functions here."""

    rays: set[str] = field(default_factory=lambda: {"ray"})
    modules: set[str] = field(default_factory=set)  # ray.serve
    functions: dict[str, str] = field(default_factory=dict)  # alias -> run/start/...

    def learn(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("ray", "ray.serve") and not alias.asname:
                    self.rays.add("ray")
                elif alias.name == "ray" and alias.asname:
                    self.rays.add(alias.asname)
                elif alias.name == "ray.serve" and alias.asname:
                    self.modules.add(alias.asname)
            return
        if node.level:
            return
        module = node.module or ""
        for alias in node.names:
            bound = alias.asname or alias.name
            if module == "ray" and alias.name == "serve":
                self.modules.add(bound)
            elif module.startswith("ray.serve") and alias.name in LIFECYCLE:
                self.functions[bound] = alias.name

    def is_serve(self, node: ast.expr) -> bool:
        """`node` names the `ray.serve` module."""
        if isinstance(node, ast.Name):
            return node.id in self.modules
        return (
            isinstance(node, ast.Attribute)
            and node.attr == "serve"
            and isinstance(node.value, ast.Name)
            and node.value.id in self.rays
        )

    def function(self, node: ast.expr | None) -> str | None:
        """`run`, `start`, `shutdown` or `delete` when `node` calls that Serve function."""
        if not isinstance(node, ast.Call):
            return None
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in LIFECYCLE and self.is_serve(f.value):
            return f.attr
        if isinstance(f, ast.Name):
            return self.functions.get(f.id)
        return None

    def found_in(self, node: ast.AST) -> ast.Call | None:
        """The first call of a Serve lifecycle function anywhere inside `node`."""
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and self.function(sub):
                return sub
        return None

    def only_lifecycle_import(self, node: ast.stmt) -> bool:
        """`from ray.serve import run, start`: an import of nothing but those functions."""
        return (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").startswith("ray.serve")
            and all(a.name in LIFECYCLE for a in node.names)
        )


@dataclass
class ServeCall:
    """A Serve lifecycle call left out of the step code, as the notebook wrote it."""

    cell: int
    line: int
    written: str
    function: str  # run, start, shutdown, delete; "" for one inside an expression
    call: ast.Call
    in_function: bool  # inside a def or lambda: its arguments are the function's


def imports_serve(node: ast.stmt) -> bool:
    """`import ray.serve`, `from ray import serve`, `from ray.serve... import ...`."""
    if isinstance(node, ast.Import):
        return any(a.name == "ray.serve" or a.name.startswith("ray.serve.") for a in node.names)
    if isinstance(node, ast.ImportFrom) and not node.level:
        module = node.module or ""
        if module == "ray":
            return any(a.name == "serve" for a in node.names)
        return module == "ray.serve" or module.startswith("ray.serve.")
    return False
