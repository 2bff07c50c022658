"""The reports of the jobs that are not a model check, and their writers: one module per job family and format.

* :mod:`~privgate.report.jobs.claims` — the claim audits' reports (``LdpAuditReport``, ``DpsgdAuditReport``),
  printed by :mod:`~privgate.report.jobs.claims_console`, drawn by :mod:`~privgate.report.jobs.claims_html`;
* :mod:`~privgate.report.jobs.federation` — a federation's report (``FederationReport``, audits and simulations),
  printed by :mod:`~privgate.report.jobs.federation_console`, drawn by :mod:`~privgate.report.jobs.federation_html`;
* :mod:`~privgate.report.jobs.markdown_sections` — each job's own section of the Markdown summary.

Every report extends :class:`privgate.report.model.BaseReport`, so every format of :mod:`privgate.report`
serves them; the registry names these writers as ``"module:function"`` strings, imported on first use.
"""
