"""Report: results as rich tables, JSON, CSV, Chrome traces and plots (no printing here)."""
