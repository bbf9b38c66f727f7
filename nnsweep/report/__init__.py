"""What a person reads: the text tables (:mod:`~nnsweep.report.text`), the HTML report
(:mod:`~nnsweep.report.html`, templates and figures in the top-level ``dashboards/``) and
the live progress display (:mod:`~nnsweep.report.progress`). It reads the studies and the
tracker; it decides nothing (the front and the best are :mod:`nnsweep.sweep.front`'s)."""

__all__: list[str] = []
