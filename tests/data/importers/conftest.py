# The fixtures are sample files in other tools' formats (the SWE-bench harness names its log
# test_output.txt): data, not tests or doctests.
collect_ignore_glob = ["fixtures/*"]
