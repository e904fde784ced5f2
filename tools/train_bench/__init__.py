"""The training benchmark's parts, one job each; ``python -m tools.train_benchmark`` is its command line."""
