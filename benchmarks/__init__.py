"""The benchmarks behind BENCHMARKS.md, as scenarios of one harness (tfm_export.bench.harness).

    python -m benchmarks                  # lists the scenarios by area
    python -m benchmarks SCENARIO --help  # one scenario's options
"""

import sys

from tfm_export.bench import fixtures

# The test fixtures' seam moved into the package (tfm_export.bench.fixtures); `benchmarks.fixtures` stays its name
# here until benchmarks/speculative.py (changed by other work today) imports it from there.
sys.modules[f"{__name__}.fixtures"] = fixtures
