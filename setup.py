"""Build hook: copies the page and the bundled model (tfm_export/resources.py's BUNDLES) into the wheel.

They stay in runtimes/ and models/ in the repository (not import packages); the wheel carries them under
tfm_export/_data/ so `tfm-export demo` and `serve-web` work from an installed package. Everything else
is in pyproject.toml.
"""

import importlib.util
import logging
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _resources():
    """tfm_export/resources.py on its own (importing the package is not possible before it is built)."""
    spec = importlib.util.spec_from_file_location("_tfm_export_resources", ROOT / "tfm_export" / "resources.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class BuildPyWithBundles(build_py):
    """build_py, then each bundle's files into build_lib/tfm_export/_data/."""

    def run(self):
        super().run()
        if self.editable_mode:  # an editable install finds them in the checkout
            return
        res = _resources()
        data = Path(self.build_lib) / "tfm_export" / res.DATA
        shutil.rmtree(data, ignore_errors=True)  # a file left by an earlier build must not ship
        for name, bundle in res.BUNDLES.items():
            sources = [ROOT / bundle.checkout / f for f in bundle.files]
            missing = [str(p) for p in sources if not p.is_file()]
            if missing and bundle.optional:
                logging.warning("tfm-export: the wheel leaves out %r (%s not found)", name, missing[0])
                continue
            if missing:
                raise FileNotFoundError(f"cannot bundle {name!r}: {', '.join(missing)} not found")
            target = data / bundle.packaged
            for file, source in zip(bundle.files, sources):  # a file in a subfolder keeps it (lib's decode/, ...)
                self.mkpath(str((target / file).parent))
                self.copy_file(str(source), str(target / file))


setup(cmdclass={"build_py": BuildPyWithBundles})
