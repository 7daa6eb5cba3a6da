"""A database that cannot be reached is reported as such, without the URL."""

from __future__ import annotations

import pytest

from armarius.errors import StorageUnavailable
from armarius.store.engine import PostgresDatabase
from tests.e2e.servers import free_port


def test_an_unreachable_postgresql_is_storage_unavailable() -> None:
    url = f"postgresql://armarius:s3cret-password@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(StorageUnavailable) as refused:
        PostgresDatabase(url, connect_timeout=1)
    assert refused.value.code == "storage_unavailable"
    assert "s3cret-password" not in str(refused.value.to_dict())
