"""CLI: thin typer commands; the only place that prints or exits."""
