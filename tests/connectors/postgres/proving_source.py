"""PostgreSQL's connector, leaving proof of the condition its readers read with (a file per reader in ``proof``):
how a test sees which of Spark's filters were pushed into the query."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connectors.postgres import PostgresSource
from connectors.postgres._options import PostgresOptions
from splitsource import option


@dataclass(frozen=True)
class ProvingOptions(PostgresOptions):
    proof: str = option("", doc="directory: each reader writes its 'where' option there")


class ProvingPostgresSource(PostgresSource):
    options_class = ProvingOptions

    def create_split_reader(self) -> Any:
        proof = self.options.proof  # type: ignore[attr-defined]
        if proof:
            (Path(proof) / f"where-{uuid.uuid4().hex}").write_text(self.options.where)
        return super().create_split_reader()
