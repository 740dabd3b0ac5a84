"""The benchmarks behind BENCHMARKS.md, as scenarios of one harness (tfm_export.bench.harness).

    python -m benchmarks                  # lists the scenarios by area
    python -m benchmarks SCENARIO --help  # one scenario's options
"""

