"""Version drift between the kernel and the cluster: what a notebook imports, and the
warning lines."""

from __future__ import annotations

from raylab.sync.drift import differences, imported_modules


def test_drift_lines() -> None:
    cells = ["import numpy as np\n%time x = 1", "from torch.nn import X", "from . import y"]
    assert imported_modules([*cells, "import os.path"]) == {"numpy", "torch", "os"}
    lines = differences(
        {"numpy": "1.26.4", "torch": "2.5.1", "pandas": "2.2.0", "gone": "1.0"},
        {"numpy": "2.1.0", "torch": "2.5.0", "pandas": "2.2.3", "gone": None},
    )
    assert lines == [
        "numpy 1.26.4 in this kernel, 2.1.0 on the cluster: objects passed between them may "
        "not load; install the same version on both (`%raycluster pip install numpy==1.26.4`)"
    ]


def test_the_kernel_side_looks_up_what_the_cells_import_in_the_background() -> None:
    import importlib.metadata as md

    from raylab.sync.drift import KernelSide

    side = KernelSide(["import packaging.version", "import os, json"])
    assert side.versions() == {"packaging": md.version("packaging")}
    assert (
        KernelSide(["import os", "x = 1"]).versions() == {}
    )  # only the stdlib: nothing to compare
    assert KernelSide(["%%not python (]"]).versions() == {}
