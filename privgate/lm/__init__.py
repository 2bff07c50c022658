"""Language models: canary exposure, verbatim extraction and the distribution-shift guard."""
