"""Plan: strategies and collectives expanded into task graphs of compute and transfer work."""
