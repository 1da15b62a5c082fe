"""Chat templates and tool-call formats.

`ffwd.templates.render` renders templates and normalises tools,
`ffwd.templates.formats` holds one module per tool-call format (markers,
incremental parser, strict-fill context), and `ffwd.templates.rows` compiles
a request's `FillPlan` from whole renderings.
"""
