"""Reporting: results file (atomic), console log, plots, HTML report, trackers."""
