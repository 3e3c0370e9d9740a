"""``pinmatrix report``: the results store rendered as HTML, Markdown, JUnit XML and JSON: ``statuses`` (the
status order and the formats, no dependencies), ``model`` (the report as data), ``html``/``markdown``/``junit``
(renderers), ``write`` (render and write)."""
