"""Analysis of runs: statistics, summaries, history, comparison, cost, retrieval."""
