"""The redis+sentinel:// URL: what it says, and one line for each wrong form."""

from __future__ import annotations

import pytest

from jobtap.connection import redis_from_url
from jobtap.errors import ConfigError
from jobtap.sentinel import SENTINEL_FORM, is_sentinel, parse_sentinel_url, sentinel_service
from jobtap.urls import safe_url


def test_the_parts_of_a_sentinel_url(tmp_path):
    secret = tmp_path / "sentinel.password"
    secret.write_text("s3cret\n")
    spec = parse_sentinel_url(
        "redis+sentinel://writer:p%40ss@10.0.0.1:26379,10.0.0.2,[::1]:26380/queues/2"
        f"?sentinel_username=watcher&sentinel_password_file={secret}"
    )
    assert spec.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 26380))
    assert (spec.service, spec.db, spec.username, spec.password) == ("queues", 2, "writer", "p@ss")
    assert (spec.sentinel_username, spec.sentinel_password, spec.tls) == ("watcher", "s3cret", None)


def test_tls_settings_hold_for_sentinels_and_primary(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("")
    spec = parse_sentinel_url(
        f"rediss+sentinel://h:26379/queues?ssl_ca_certs={ca}&ssl_check_hostname=false"
    )
    assert spec.tls == {"ssl": True, "ssl_ca_certs": str(ca), "ssl_check_hostname": False}
    client = redis_from_url(f"rediss+sentinel://h:26379/queues?ssl_ca_certs={ca}")
    assert is_sentinel(client) and sentinel_service(client) == "queues"
    assert client.connection_pool.connection_class.__name__ == "_SentinelTLSConnection"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:26379", "no service name"),
        ("redis+sentinel:///queues", "no Sentinel host"),
        ("redis+sentinel://h:x/queues", "port 'x' of 'h:x' is not a number"),
        ("redis+sentinel://h:1,,k:2/queues", "an empty host"),
        ("redis+sentinel://h:1/queues/zero", "database 'zero' is not a number"),
        ("redis+sentinel://h:1/a/0/b", "only /SERVICE or /SERVICE/DB"),
        ("redis+sentinel://h:1/queues?master=x", "unknown parameter master"),
        ("redis+sentinel://h:1/queues?ssl_ca_certs=/x", "use rediss+sentinel://"),
        ("rediss+sentinel://h:1/queues?ssl_ca_certs=/nowhere", "/nowhere: no such file"),
    ],
)
def test_a_wrong_form_is_one_line(url, says):
    with pytest.raises(ConfigError) as info:
        redis_from_url(url)
    line = str(info.value)
    assert says in line and "\n" not in line
    if "bad Sentinel URL" in line:
        assert SENTINEL_FORM in line


def test_passwords_stay_out_of_messages():
    url = "redis+sentinel://writer:pw@h:1,k:2/queues?sentinel_password=spw"
    assert safe_url(url) == "redis+sentinel://writer:***@h:1,k:2/queues?sentinel_password=***"


def test_a_clone_reaches_the_same_service_with_a_pool_of_its_own():
    from jobtap.connection import clone

    client = redis_from_url("redis+sentinel://h:1,k:2/queues/3", socket_timeout=2)
    twin = clone(client, socket_timeout=7)
    pool = twin.connection_pool
    assert is_sentinel(twin) and sentinel_service(twin) == "queues"
    assert pool is not client.connection_pool
    assert pool.sentinel_manager is client.connection_pool.sentinel_manager
    assert pool.connection_kwargs["db"] == 3 and pool.connection_kwargs["socket_timeout"] == 7
    assert pool.connection_kwargs["connection_pool"] is pool.proxy
