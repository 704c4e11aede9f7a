"""docs/api_coverage.md is what tools/api_coverage.py computes now."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("api_coverage", ROOT / "tools" / "api_coverage.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_the_api_coverage_page_is_current():
    tool = load_tool()
    page = (ROOT / "docs" / "api_coverage.md").read_text()
    assert page == tool.render(), "docs/api_coverage.md is stale: run tools/api_coverage.py"


def test_core_names_are_public_torch_names():
    tool = load_tool()
    for path, names in tool.CORE.items():
        reference = tool.resolve(path)
        unknown = [n for n in names.split() if not hasattr(reference, n)]
        assert not unknown, f"{path}: {unknown} are not torch names"
