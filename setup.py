"""Metadata lives in setup.cfg. This file adds one build step: the jars the package ships (the ApplicationMaster's,
airflow_provider_melon/am/melon-appmaster.jar, and the scheduler plug-in's, airflow_provider_melon/rm/) are built
(Maven, only when missing or stale: appmaster/build.sh) before the sdist's files or the wheel's Python files are
collected, so the sdist and every wheel carry them. A wheel built from an sdist (which holds fresh jars) runs no
Maven and needs no JDK; where a jar must be built and cannot be, the build stops saying how to build it."""

import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
JAR = HERE / "airflow_provider_melon" / "am" / "melon-appmaster.jar"
HOW_TO_BUILD = (
    "The ApplicationMaster jar (airflow_provider_melon/am/melon-appmaster.jar) is built from appmaster/ with JDK 17 "
    "and Maven: install both (Debian: apt-get install openjdk-17-jdk-headless maven) and build again, or run "
    "`bash appmaster/build.sh` in the source tree first; or build the wheel (or the sdist) on a host that has them, "
    "and install that here: it carries the jar."
)


def build_application_master() -> None:
    script = HERE / "appmaster" / "build.sh"
    if not script.is_file():
        if not JAR.is_file():
            raise SystemExit(f"neither appmaster/ nor a packaged AM jar is here. {HOW_TO_BUILD}")
        return
    try:
        subprocess.run(["bash", str(script)], check=True)
    except subprocess.CalledProcessError as exc:
        missing = [tool for tool in ("mvn", "javac") if shutil.which(tool) is None]
        why = f" ({', '.join(missing)} not found on PATH)" if missing else ""
        raise SystemExit(f"appmaster/build.sh failed (exit {exc.returncode}){why}. {HOW_TO_BUILD}") from None


class BuildPyWithAppMaster(build_py):
    def run(self):
        build_application_master()
        super().run()


class SdistWithAppMaster(sdist):
    def run(self):
        build_application_master()  # before MANIFEST.in's `include airflow_provider_melon/am/*.jar` is read
        super().run()


setup(cmdclass={"build_py": BuildPyWithAppMaster, "sdist": SdistWithAppMaster})
