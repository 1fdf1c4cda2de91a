"""smelt's corpus of small programs (issue 11): base.py declares them,
programs/ holds them by category, harness.py runs one on eager and smelt and
compares, driver.py runs them in child processes (crashes are reported,
not fatal). tests/test_corpus.py and benchmarks/corpus_report.py use it."""
