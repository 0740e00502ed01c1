"""HTML view of a cluster for notebooks: one row per node, one bar per GPU."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ._core import Cluster

_BAR_WIDTH_PX = 90
# Nodes drawn in full; a larger cluster ends with a "... and K more nodes" row
# (the totals below the table still cover every node). A notebook cell of
# 10,000 nodes would otherwise be about 19 MB of HTML.
MAX_HTML_NODES = 50


def _bar(used: int, total: int, healthy: bool) -> str:
    fraction = used / total if total > 0 else 0.0
    color = "#c0392b" if fraction >= 0.9 else "#e67e22" if fraction >= 0.6 else "#27ae60"
    if not healthy:
        color = "#7f8c8d"
    width = round(fraction * _BAR_WIDTH_PX)
    return (
        f'<div style="display:inline-block;width:{_BAR_WIDTH_PX}px;height:10px;'
        f'background:#ecf0f1;vertical-align:middle;margin-right:4px">'
        f'<div style="width:{width}px;height:10px;background:{color}"></div></div>'
        f"{used}/{total}{'' if healthy else ' (unhealthy)'}"
    )


def cluster_html(self: "Cluster") -> str:
    """Cluster._repr_html_: per node, each GPU's allocated/total memory as a bar.

    Only the first MAX_HTML_NODES nodes (in the order they were added) get a
    row; the rest are counted in a last row. The totals cover every node.
    """
    unit = html.escape(self.memory_unit)
    names = self.node_names()
    nodes = [self.get_node(name) for name in names[:MAX_HTML_NODES]]
    max_gpus = max((len(n.gpus) for n in nodes), default=0)
    head = "".join(f"<th>GPU{i}</th>" for i in range(max_gpus))
    rows = []
    for node in nodes:
        cells = []
        for g in node.gpus:
            label = html.escape(g.model) if g.model else ""
            cells.append(
                f'<td title="{label} holders={g.holders} compute={g.compute_used}/1000">'
                f"{_bar(g.memory_used, g.memory, g.healthy)}</td>"
            )
        cells.extend("<td></td>" for _ in range(max_gpus - len(node.gpus)))
        state = "" if node.schedulable else " (cordoned)"
        rows.append(
            f"<tr><td>{html.escape(node.name)}{state}</td>"
            f"<td>{html.escape(node.address) or '-'}</td>{''.join(cells)}"
            f"<td>{node.gpu_memory_used}/{node.gpu_memory}</td>"
            f"<td>{len(node.requests)}</td></tr>"
        )
    if len(names) > len(nodes):
        more = len(names) - len(nodes)
        rows.append(
            f'<tr><td colspan="{max_gpus + 4}">... and {more} more node'
            f"{'' if more == 1 else 's'}</td></tr>"
        )
    usage = self.usage()
    pct = usage.gpu_memory_used * 100 // usage.gpu_memory if usage.gpu_memory else 0
    return (
        '<table class="gpushare-cluster">'
        f"<thead><tr><th>NAME</th><th>IPADDRESS</th>{head}"
        f"<th>GPU Memory({unit})</th><th>Requests</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        f"<p>Allocated/Total GPU Memory In Cluster: {usage.gpu_memory_used}/"
        f"{usage.gpu_memory} ({pct}%), {usage.placements} requests</p>"
    )
