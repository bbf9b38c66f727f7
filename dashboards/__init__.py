"""Report templates and figure builders (installed as ``nnsweep.dashboards``)."""
