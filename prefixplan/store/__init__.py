"""The SQLite registry: versions, analyses, warm runs and prefill profiles.

``open_store()`` returns a :class:`Store`; each table family has its own module
(``versions``, ``analyses``, ``warm_runs``, ``profiles``) and ``schema`` holds the migrations.
"""

from prefixplan.store.base import STATUSES, iso
from prefixplan.store.db import DEFAULT_DB, ENV_DB, Store, open_store, resolve_db_path
from prefixplan.store.profile_lookup import find_profile, resolve_profile, stored_profile
from prefixplan.store.versions import VersionRecord

__all__ = [
    "DEFAULT_DB",
    "ENV_DB",
    "STATUSES",
    "Store",
    "VersionRecord",
    "find_profile",
    "iso",
    "open_store",
    "resolve_db_path",
    "resolve_profile",
    "stored_profile",
]
