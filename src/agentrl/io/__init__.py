"""I/O: results file (atomic), console log, plots."""
