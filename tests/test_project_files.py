"""The project's own files: the changelog names the package's version, the license is the Apache License 2.0 that
pyproject.toml declares and ships, the version is written once, and the documentation names no internal issue or
task numbers (links to other projects' issues allowed)."""
import hashlib
import re
import sys
from pathlib import Path

import pytest

import hwquant

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project's venv is 3.11
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent

# sha256 of the Apache License 2.0 as the Apache Software Foundation publishes it
# (https://www.apache.org/licenses/LICENSE-2.0.txt), unmodified
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def changelog_versions(text):
    """The version headings of a Keep-a-Changelog file, newest first: '## [0.1.0] - 2026-01-02' -> '0.1.0'."""
    return re.findall(r"^## \[([^\]]+)\]", text, flags=re.MULTILINE)


def test_changelog_newest_release_is_the_package_version():
    versions = changelog_versions((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert versions and versions[0] == "Unreleased", f"CHANGELOG.md should open with '## [Unreleased]': {versions}"
    released = [v for v in versions if v != "Unreleased"]
    assert released, "CHANGELOG.md has no released version"
    assert released[0] == hwquant.__version__, (
        f"CHANGELOG.md's newest version is {released[0]}, hwquant.__version__ is {hwquant.__version__}")
    assert len(set(released)) == len(released), f"a version appears twice in CHANGELOG.md: {released}"


def test_license_is_the_apache_2_text_and_ships():
    license_file = ROOT / "LICENSE"
    assert license_file.is_file(), "LICENSE is missing"
    text = license_file.read_bytes()
    assert b"Apache License" in text and b"Version 2.0, January 2004" in text
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256, "LICENSE is not the unmodified Apache License 2.0"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert "LICENSE" in project.get("license-files", []), "pyproject.toml's license-files should ship LICENSE"


def test_version_is_written_once():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"], "pyproject.toml should read the version from src/hwquant/version.py"
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hwquant.version.__version__"}


# "issue 12", "issues 26 and 27", "Issue #7", "#31", "task 40", "session 9", "session-8"
INTERNAL_REFERENCE = re.compile(r"\bissues?\s*#?\d+|(?<![\w/&#])#\d{1,5}\b|\btasks?\s*#?\d+|\bsession[- ]?#?\d+",
                                re.IGNORECASE)
# a link to another page (another project's GitHub issue) may say what it links to: the link is left out, text and all
LINK = re.compile(r"\[[^\]]*\]\(\s*https?://[^)]*\)|<https?://[^>]*>|https?://\S+")


def internal_references(text):
    """(line number, the reference) for every internal issue / task / session number in a Markdown text."""
    return [(n, m.group(0)) for n, line in enumerate(text.splitlines(), 1)
            for m in INTERNAL_REFERENCE.finditer(LINK.sub("", line))]


@pytest.mark.parametrize("line", ["see issue 12", "(issue 7)", "Issues 26 and 27 changed it", "fixed in #31",
                                  "Task 40 measured", "since session 9", "the session-8 changes", "issue #3"])
def test_internal_references_are_found(line):
    assert internal_references(line)


@pytest.mark.parametrize("line", [
    "torch's own bug: [pytorch issue 123](https://github.com/pytorch/pytorch/issues/123)",
    "https://github.com/onnx/onnx/issues/4521", "<https://github.com/keras-team/keras/issues/19000>",
    "the task agreement", "an ONNX Runtime session", "&#8203;", "page.md#section-2",
    "# Heading", "tissue 5",
])
def test_other_text_is_not_an_internal_reference(line):
    assert not internal_references(line)


def documentation_files():
    docs = ROOT / "docs"
    return sorted({*docs.glob("*.md"), *docs.glob("**/*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md",
                   ROOT / "CONTRIBUTING.md"})


def test_documentation_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in documentation_files()}
    assert {"README.md", "docs/BENCHMARKS.md", "docs/architecture.md", "docs/guide/pytorch.md"} <= names


@pytest.mark.parametrize("path", documentation_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_documentation_names_no_internal_issue_numbers(path):
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing")
    found = internal_references(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.relative_to(ROOT)} names internal issue / task numbers (name the feature instead): "
                       + "; ".join(f"line {n}: {ref!r}" for n, ref in found))
