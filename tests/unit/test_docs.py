"""The documentation cannot drift from the code it describes.

``docs/reference/cli.md`` is generated from the ``pgq`` application by
``docs/generate_cli_reference.py``; these tests regenerate it and compare. When one fails,
run ``python docs/generate_cli_reference.py`` and commit the result.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GENERATOR = DOCS / "generate_cli_reference.py"
CLI_REFERENCE = DOCS / "reference" / "cli.md"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_cli_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date(generator: ModuleType, tmp_path: Path) -> None:
    fresh = tmp_path / "cli.md"
    generator.write(fresh)
    assert CLI_REFERENCE.read_text(encoding="utf-8") == fresh.read_text(encoding="utf-8"), (
        "docs/reference/cli.md is out of date: run python docs/generate_cli_reference.py"
    )


def test_cli_reference_covers_every_command(generator: ModuleType) -> None:
    import typer

    from pgqueue.cli.app import app

    root = typer.main.get_command(app)
    ctx = generator._context(root, "pgq")
    paths = [sub_ctx.command_path for _, sub_ctx in generator._walk(root, ctx)]
    text = CLI_REFERENCE.read_text(encoding="utf-8")
    headings = re.findall(r"^#+ `(pgq[^`]*)`$", text, flags=re.MULTILINE)
    assert headings == paths


def test_relative_links_in_docs_resolve() -> None:
    """Every relative Markdown link in README, CHANGELOG and docs/ points at a file."""
    # Pages other engineers are still writing may be linked before they land.
    pending = {DOCS / "explanation" / "delivery-guarantees.md",
               DOCS / "explanation" / "performance.md"}
    sources = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")]
    broken = []
    for source in sources:
        text = re.sub(r"```.*?```", "", source.read_text(encoding="utf-8"), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = (source.parent / target.split("#", 1)[0]).resolve()
            if not path.exists() and path not in pending:
                broken.append(f"{source.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_schema_reference_names_every_column_index_and_constraint() -> None:
    """docs/reference/schema.md mentions everything in pgqueue.db.schema.

    ``pgqueue.db.schema`` is itself checked against the migrated database by the
    schema-snapshot test, so a column, index or constraint added by a migration fails
    here until the SQL reference describes it.
    """
    from pgqueue.db.schema import metadata

    text = (DOCS / "reference" / "schema.md").read_text(encoding="utf-8")
    missing = []
    for table in metadata.tables.values():
        heading = f"## `pgqueue.{table.name}`"
        assert heading in text, f"no section {heading}"
        section = text.split(heading, 1)[1].split("\n## ", 1)[0]
        names = [column.name for column in table.columns]
        names += [index.name for index in table.indexes if index.name]
        names += [c.name for c in table.constraints if isinstance(c.name, str)]
        missing += [f"{table.name}.{name}" for name in names if f"`{name}`" not in section]
    assert missing == []
