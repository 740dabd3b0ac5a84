"""Moved to tfm_export.bench.optimum_client (the peers' thin backends live in the package); this name stays only
until benchmarks/speech/ imports the new one (#59)."""

from tfm_export.bench.optimum_client import WORKER, OptimumProcess, optimum_versions, tjs_folder  # noqa: F401
