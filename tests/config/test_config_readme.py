"""README's configuration table and the config schema agree on the `[daemon]` and `[gcp]` keys:
every key the schema accepts has its row, and no row names a key the schema refuses (a key
such as `daemon.http_token_env` is documented in the same commit as it is accepted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpucared.config.schema import DaemonTable, GcpTable, Table

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| `([a-z_]+)\.([a-z_]+)` \|", re.M)


@pytest.mark.parametrize(("section", "table"), [("daemon", DaemonTable), ("gcp", GcpTable)])
def test_the_readme_config_table_lists_the_schema_keys(section: str, table: type[Table]) -> None:
    rows = {key for s, key in ROW.findall(README.read_text(encoding="utf-8")) if s == section}
    assert rows == set(table.model_fields), f"README [{section}] rows vs schema"
