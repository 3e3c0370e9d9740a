"""``pinmatrix report``: the results store rendered as HTML, Markdown, JUnit XML and JSON: ``model`` (the
report as data), ``archscan`` (an arch scan's table in it), ``html``/``markdown``/``junit`` (renderers),
``jsonstream`` (report.json a cell at a time), ``write`` (every format streamed to its files), ``browser`` (the screenshot), ``settings`` (one report, start to end),
``github_actions`` (annotations and the job summary), ``tables`` (the tables commands print). The status
order and the formats are ``pinmatrix.statuses`` (no dependencies)."""
