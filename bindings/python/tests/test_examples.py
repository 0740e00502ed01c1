"""The examples CI keeps alive: the quickstart script and the notebook."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_quickstart_runs_scenario_s1() -> None:
    script = ROOT / "examples" / "python" / "quickstart.py"
    out = subprocess.run([sys.executable, str(script)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    assert "25/28 (89%)" in out
    assert "ALIYUN_COM_GPU_MEM_CONTAINER=5" in out


def test_notebook_executes_without_errors() -> None:
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed")
    nb = nbformat.read(ROOT / "examples" / "notebook.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs
            if o.output_type == "execute_result" and "text/html" in o.get("data", {})]
    assert any("gpushare-cluster" in h for h in html), "the cluster did not render as HTML"
    # The sweep's curves and the occupancy picture are drawn (matplotlib's
    # inline backend shows every figure a cell makes).
    sources = "".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    assert "gs.sweep(" in sources and "gpushare.plot." in sources
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o["data"]]
    assert len(images) >= 2, "the notebook drew fewer than two figures"
