"""Only what pyproject.toml cannot say: the dashboard lives in dashboard/ but installs as `medhelm_dashboard`."""

from setuptools import find_packages, setup

setup(
    packages=find_packages("services", include=["medhelm", "medhelm.*"]) + ["medhelm_dashboard"],
    package_dir={"": "services", "medhelm_dashboard": "dashboard"},
)
