"""Engine: discrete-event simulation of task graphs on a shared network, and the closed forms."""
