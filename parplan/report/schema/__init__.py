"""Package data: the versioned JSON Schemas of the ``--json`` documents.

``report-v1.schema.json`` describes version 1 of the ``simulate`` / ``compare-strategies`` document
(see :mod:`parplan.report.json_report`), ``search-v1.schema.json`` the ``search`` document (see
:mod:`parplan.report.search`); load either with :func:`parplan.report.json_report.load_schema`.
"""
