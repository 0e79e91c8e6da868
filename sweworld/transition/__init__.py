"""SWT: the transition model that predicts what running a command would print."""
