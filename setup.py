"""Build hook: a wheel ships the repository's ``configs/`` as ``stoixlite/configs``.

``configs/`` at the repository root stays the one source. An editable install reads it in place
(``stoixlite.cli.configs.CONFIG_DIR`` falls back to ``<repo>/configs``); a regular build copies it
into the built package, so ``pip install .`` or a wheel can run ``python -m stoixlite.rec_ppo``
from any directory. Everything else is declared in ``pyproject.toml``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CONFIGS = Path(__file__).resolve().parent / "configs"


class BuildPyWithConfigs(build_py):
    """``build_py`` that also copies ``configs/`` to ``<build>/stoixlite/configs``."""

    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            target = Path(self.build_lib) / "stoixlite" / "configs"
            shutil.copytree(CONFIGS, target, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithConfigs})
