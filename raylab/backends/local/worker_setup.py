"""The first program of each Ray worker process of a local cluster, in place of Ray's
setup_worker.py: it applies the worker's runtime env (its variables, its command prefix
such as `cd WORKING_DIR &&`, its Python) and execs the worker, as Ray's does, without
importing Ray first.

Ray's setup_worker.py imports Ray (0.45 s of CPU on an idle core) only to read the runtime
env's JSON and exec a shell, whose worker then imports Ray again. A local cluster starts
its workers on the laptop's few cores, beside everything else a starting cluster runs, and
a notebook's first GPU task waits for one. This does the same for Python workers with the
standard library alone, and hands any other language, or a runtime env it does not know,
to Ray's own.

The raylet runs this file by its path (ray_start.py names it as the nodes' worker set-up),
so it imports nothing of raylab.
"""

import argparse
import json
import os
import re
import shlex
import sys
from typing import Any

# What RuntimeEnvContext holds in the Ray this was written against (2.60); a context with
# more is Ray's to read.
FIELDS = {"command_prefix", "env_vars", "py_executable", "override_worker_entrypoint", "java_jars"}


def exec_python_worker(context: dict[str, Any], passthrough: list[str]) -> None:
    """RuntimeEnvContext.exec_worker for a Python worker (ray/_private/runtime_env/context.py)."""
    for key, value in (context.get("env_vars") or {}).items():
        # Ray's update_envs: ${X} from this environment, an unknown one empty.
        os.environ[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", os.path.expandvars(value))
    args = list(passthrough)
    if context.get("override_worker_entrypoint"):
        args[0] = context["override_worker_entrypoint"]
    python = context.get("py_executable") or sys.executable
    command = [*(context.get("command_prefix") or []), "exec", python]
    command += [shlex.quote(arg) for arg in args]
    if "DYLD_LIBRARY_PATH" in os.environ:  # as Ray does: macOS drops it across an exec
        command.insert(0, f"DYLD_LIBRARY_PATH={os.environ['DYLD_LIBRARY_PATH']}")
    os.execvp("bash", ["bash", "-c", " ".join(command)])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--serialized-runtime-env-context", type=str)
    parser.add_argument("--language", type=str)
    known, passthrough = parser.parse_known_args(argv)
    context = json.loads(known.serialized_runtime_env_context or "{}")
    if known.language != "PYTHON" or sys.platform == "win32" or not set(context) <= FIELDS:
        ray_setup = os.path.join(ray_workers_dir(), "setup_worker.py")
        os.execv(sys.executable, [sys.executable, ray_setup, *argv])
    exec_python_worker(context, passthrough)


def ray_workers_dir() -> str:
    """Ray's folder of worker programs, found without importing Ray."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    if spec is None or spec.origin is None:
        raise SystemExit("raylab's worker set-up: this Python has no Ray")
    return os.path.join(os.path.dirname(spec.origin), "_private", "workers")


if __name__ == "__main__":
    main(sys.argv[1:])
