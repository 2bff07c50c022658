"""The reports of the jobs that are not a model check, and their writers: one module per job family and format.

:mod:`~privgate.report.jobs.claims` (LDP and DP-SGD claim audits) and :mod:`~privgate.report.jobs.federation`
(federated audits and simulations), each with its ``_console`` and ``_html`` writer, and
:mod:`~privgate.report.jobs.markdown_sections` (each job's Markdown section). Every report extends
:class:`privgate.report.model.BaseReport`; the registry names these writers as ``"module:function"``
strings, imported on first use.
"""
