"""A finished job's native record packed with a dictionary (jobtap.packing)."""

from __future__ import annotations

import hashlib
from importlib.resources import files

import orjson
import pytest

from jobtap.packing import (
    NATIVE_FIELDS,
    PRIMER_FIELDS,
    dictionary,
    native_read,
    pack_native,
    unpack_native,
)

NATIVE = {"Job_Name": "relax", "Job_Owner": "judy3@simhost", "job_state": "F", "Exit_status": 0}


def test_native_dictionary_1_is_the_released_one():
    """Records packed with dictionary 1 are kept for the retention: its file
    must never change (a new dictionary is a new version), and holds a part
    for each scheduler."""
    raw = files("jobtap").joinpath("schemas", "native-dictionary-1.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == (
        "d5418a38305fc29dbf6e38488e3187d4cc2a2a71e8693d2190fe6a6ccfd31d2e"
    )
    parts = dictionary("1")
    assert set(parts) == {"pbs", "slurm", "flux"}
    for part in parts.values():
        assert isinstance(
            orjson.loads(part[: part.index(b"}{") + 1] if b"}{" in part else part), dict
        )


@pytest.mark.parametrize("scheduler", ["pbs", "slurm", "flux", "lsf", ""])
def test_a_record_comes_back_whatever_its_scheduler(scheduler):
    """A scheduler without a part of the dictionary (or none named) packs with
    the hash's own fields alone."""
    fields = {"scheduler": scheduler, "user": "judy3", "name": "relax", "comment": "x" * 50}
    packed = pack_native(orjson.dumps(NATIVE).decode(), fields)
    assert unpack_native(packed, fields) == NATIVE
    stored = {k: v.encode() for k, v in {**fields, "native_zd": packed}.items()}
    # HMGET's reply: bytes as redis-py reads them, None for a field absent
    assert native_read([stored.get(f) for f in NATIVE_FIELDS]) == NATIVE


def test_the_dictionary_ends_with_the_hashs_own_fields():
    """A value the record repeats costs a reference, not its bytes."""
    text = orjson.dumps(
        {**NATIVE, "comment": "Job run at Sun Nov 22 at 15:54 on (node011:ncpus=8)"}
    )
    bare = pack_native(text.decode(), {"scheduler": "pbs"})
    primed = pack_native(
        text.decode(),
        {"scheduler": "pbs", "comment": "Job run at Sun Nov 22 at 15:54 on (node011:ncpus=8)"},
    )
    assert len(primed) < len(bare) - 20
    assert "comment" in PRIMER_FIELDS
