"""Package data: the versioned JSON Schema of the ``simulate`` / ``compare-strategies`` --json output.

``report-v1.schema.json`` describes version 1 (see :mod:`parplan.report.json_report`); load it
with :func:`parplan.report.json_report.load_schema`.
"""
