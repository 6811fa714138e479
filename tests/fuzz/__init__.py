"""Coverage-guided fuzzing of brokerscope with atheris (see tests/fuzz/run.py)."""
