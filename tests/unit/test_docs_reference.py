"""The docs' reference generator (docs/hooks/reference.py): Markdown escaping and JSON-schema types in words."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.unit

HOOK = Path(__file__).resolve().parents[2] / "docs" / "hooks" / "reference.py"


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_text_escapes_what_markdown_would_read(hook: ModuleType) -> None:
    assert hook.text("a|b <c> *d* [e] `f` #g") == r"a&#124;b &lt;c&gt; \*d\* \[e\] \`f\` \#g"
    assert hook.text("two\n  lines") == "two lines"


def test_code_keeps_a_table_cell_whole(hook: ModuleType) -> None:
    assert hook.code("--k <int>") == "`--k <int>`"
    assert (
        hook.code("--endpoint <chat|completions>") == "<code>--endpoint &lt;chat&#124;completions&gt;</code>"
    )
    assert hook.code("a`b") == "``a`b``"


def test_types_in_words_link_nested_models(hook: ModuleType) -> None:
    assert hook.type_of({"$ref": "#/$defs/LoadConfig"}) == "[LoadConfig](#loadconfig)"
    assert hook.type_of({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string or null"
    assert hook.type_of({"type": "array", "items": {"type": "integer"}}) == "list of integer"
    assert hook.type_of({"enum": ["on", "off"]}) == 'one of `"on"`, `"off"`'
    assert (
        hook.type_of({"type": "object", "additionalProperties": {"type": "string"}})
        == "map of string to string"
    )
    assert hook.type_of({}) == "any"


def test_a_model_table_names_required_fields_defaults_and_bounds(hook: ModuleType) -> None:
    schema = {
        "properties": {
            "k": {"type": "integer", "minimum": 1, "maximum": 16, "description": "K."},
            "name": {"type": "string", "default": "x"},
        },
        "required": ["k"],
    }
    rows = hook.model_table(schema)
    assert rows[2] == "| `k` | integer | required | K. (&gt;= 1, &lt;= 16) |"
    assert rows[3] == '| `name` | string | `"x"` |   |'


def test_the_readmes_links_into_the_docs_point_at_pages() -> None:
    """The README links the site's pages by their Markdown files (mkdocs --strict checks the pages' own links)."""
    root = HOOK.parents[2]
    readme = (root / "README.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\((docs/[^)#\s]+)", readme))
    assert len(links) > 10
    missing = sorted(link for link in links if not (root / link).is_file())
    assert not missing, f"README links to missing docs pages: {missing}"
