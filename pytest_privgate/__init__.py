"""pytest plugin for privgate (assertions and fixtures arrive with the pipeline issue)."""
