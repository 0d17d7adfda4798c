"""Metadata lives in setup.cfg. This file adds one build step: before the Python files are collected, the
ApplicationMaster jar is built (Maven, only when missing or stale: appmaster/build.sh) and placed at
airflow_provider_melon/am/melon-appmaster.jar, so every wheel carries the AM."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithAppMaster(build_py):
    def run(self):
        script = HERE / "appmaster" / "build.sh"
        if script.is_file():
            subprocess.run(["bash", str(script)], check=True)
        elif not (HERE / "airflow_provider_melon" / "am" / "melon-appmaster.jar").is_file():
            raise SystemExit("neither appmaster/ (to build the AM jar) nor a packaged AM jar is here")
        super().run()


setup(cmdclass={"build_py": BuildPyWithAppMaster})
