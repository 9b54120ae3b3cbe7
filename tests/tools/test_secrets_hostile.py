"""Secrets stay masked (the env tool) and stay home (the bash tool): vendor tokens anywhere in a
value, bearer credentials, URL passwords holding ``/`` and ``@``, JSON and ``key=value`` fields,
registry tokens; in linear time on hostile values, off the event loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from fanloop.errors import ToolError
from fanloop.tools import BashTool, EnvTool
from fanloop.tools._secrets import (
    MAX_SCAN,
    contains_secret,
    is_secret_variable,
    is_sensitive_name,
    mask_value,
    redact,
    scrub_environ,
)
from heartbeat import cpu_seconds, heartbeat

# (value, the secret part that must never show)
SECRET_VALUES = [
    ("sk-abcdefghijklmnopqrstuvwxyz0123456789", "abcdefghijklmnop"),
    ("key is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz012345-xyz here", "AbCdEfGhIjKlMnOp"),
    ("--openai sk-proj-AbCdEfGhIjKlMnOpQrStUvWx_yz01", "AbCdEfGhIjKlMnOp"),
    ("clone with ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOp"),
    ("x gho_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOp"),
    ("x ghs_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOp"),
    ("x github_pat_11ABCDEFG0123456789_AbCdEfGhIjKlMnOpQrStUv", "AbCdEfGhIjKlMnOp"),
    ("slack=xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "1234567890123-AbCd"),
    ("x xoxp-123456789012-1234567890123-AbCdEfGhIjKlMnOp", "1234567890123-AbCd"),
    ("https://hooks.slack.com/services/T0000/B0000/AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOp"),
    ("id AKIAIOSFODNN7EXAMPLE region eu", "IOSFODNN7EXAMPLE"),
    ("temp ASIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("maps AIzaSyA-AbCdEfGhIjKlMnOpQrStUvWxYz01234", "AbCdEfGhIjKlMnOp"),
    ("gitlab glpat-AbCdEfGhIjKlMnOpQrSt", "AbCdEfGhIjKlMnOp"),
    ("npm npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOp"),
    ("stripe sk_live_AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOp"),
    ("stripe rk_live_AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOp"),
    ("hf hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "AbCdEfGhIjKlMnOp"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9P",
        "dozjgNryP4J3jVmNHl0w5N",
    ),
    (
        "prefix\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1abc\n"
        "-----END RSA PRIVATE KEY-----",
        "MIIEpAIBAAKCAQEA1abc",
    ),
    ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n"}', "MIIEvQIBADAN"),
    ("Authorization: Bearer abc.def-ghi_jkl012", "abc.def-ghi_jkl012"),
    ("curl -H 'authorization: token t0k3nValue99'", "t0k3nValue99"),
    ("proxy: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("postgres://u:p@ss/w@rd@host/db", "ss/w@rd"),
    ("postgresql://admin:hunter2@db.internal:5432/app", "hunter2"),
    ("amqp://guest:s3cr%2Fet@rabbit/", "s3cr%2Fet"),
    ("redis://:onlypass@cache:6379", "onlypass"),
    ("mongodb+srv://u:m0ng0pw@h1,h2/db?x=1", "m0ng0pw"),
    ('{"api_key": "abc123xyz", "client_secret": "shh-its-secret", "name": "n"}', "abc123xyz"),
    ('{"api_key": "abc123xyz", "client_secret": "shh-its-secret", "name": "n"}', "shh-its-secret"),
    ("{'password': 'pa ss w0rd'}", "pa ss w0rd"),
    ("//registry.npmjs.org/:_authToken=AbC123-def456", "AbC123-def456"),
    ('{"auths":{"https://index.docker.io/v1/":{"auth":"dXNlcjpwYXNz"}}}', "dXNlcjpwYXNz"),
    ("host=db user=app password=hunter2 dbname=x", "hunter2"),
    ("AccountName=a;AccountKey=Zm9vYmFyYmF6+/==;EndpointSuffix=x", "Zm9vYmFyYmF6"),
    ("https://acct.blob.core.windows.net/c?sv=2020&sig=AbCdEf%2Bgh", "AbCdEf%2Bgh"),
    ("run --api-key AbCdEf0123 --verbose", "AbCdEf0123"),
    ("X-Api-Key: AbCdEf0123", "AbCdEf0123"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY1", "wJalrXUtnFEMI"),  # a bare random token
]


@pytest.mark.parametrize(("value", "secret"), SECRET_VALUES)
def test_secrets_inside_values_are_masked(value: str, secret: str) -> None:
    shown = mask_value("INNOCENT_LOOKING", value)
    assert secret not in shown
    assert "******" in shown
    assert contains_secret(value)
    assert is_secret_variable("INNOCENT_LOOKING", value)


@pytest.mark.parametrize(("value", "secret"), SECRET_VALUES[:-1])
def test_redact_hides_secrets_in_any_text(value: str, secret: str) -> None:
    text = f"log line: {value} (end)"
    assert secret not in redact(text)
    assert redact(text).endswith("(end)")


def test_only_the_secret_part_of_a_value_is_masked() -> None:
    assert mask_value("DB", "postgres://u:p@ss/w@rd@host/db") == "postgres://u:******@host/db"
    assert mask_value("CFG", '{"api_key": "abc", "region": "eu"}') == (
        '{"api_key": "******", "region": "eu"}'
    )
    assert mask_value("H", "Authorization: Bearer abcdefgh") == "Authorization: Bearer ******"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        # the password of the URL that has one, however many URLs share the run
        (
            "see https://example.com/login?next=https://user:pw@host/x",
            "see https://example.com/login?next=https://user:******@host/x",
        ),
        ("http://a/?x=http://u:pw@h/?y=ftp://z@w", "http://a/?x=http://u:******@w"),
        ("http://u:pw@host/?r=ftp://x@y", "http://u:******@y"),
        ("://u:pw@host", "://u:******@host"),
        ("https://Xavier:pw@host", "https://Xavier:******@host"),
        ("http://host:8080/path@", "http://host:******@"),  # a "/" may be in a password
        # no password: nothing to hide, and nothing hidden across the whitespace
        ("https://mastodon.social/@alice", "https://mastodon.social/@alice"),
        ("https://user:@host/", "https://user:@host/"),
        ("http://host:8080/path and mail me@example.com", None),
        ("http://host:8080/ me:pw@x", None),
    ],
)
def test_url_passwords_are_masked_exactly(text: str, shown: str | None) -> None:
    assert redact(text) == (text if shown is None else shown)


def test_a_masked_field_keeps_its_quotes_only() -> None:
    assert redact("password=Xyz123 next") == "password=****** next"
    assert redact('password="Xyz123" next') == 'password="******" next'
    assert redact("password='Xyz123' next") == "password='******' next"


def test_a_value_of_exactly_max_scan_characters_is_still_checked() -> None:
    assert not contains_secret("a" * MAX_SCAN)
    assert mask_value("X", "a" * MAX_SCAN) == "a" * MAX_SCAN
    assert contains_secret("a" * (MAX_SCAN + 1))


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "HF_TOKEN",
        "GH_PAT",
        "NPM_CONFIG__AUTH",
        "MY_SECRET",
        "ADMIN_PASSWD",
        "SMTP_PASS",
        "MYSQL_PWD",
        "DB_PW",
        "SLACK_WEBHOOK_URL",
        "AZURE_STORAGE_CONNECTION_STRING",
        "SSH_AUTH_SOCK",
        "BEARER",
        "SESSION_ID",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "client_secret",
        "Jwt",
        "SENTRY_DSN",
    ],
)
def test_more_sensitive_names(name: str) -> None:
    assert is_sensitive_name(name)
    assert mask_value(name, "harmless") == "****** (masked, 8 characters)"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PATH", "/usr/local/bin:/usr/bin:/opt/key:/home/me/.tokens/bin"),
        ("HOME", "/home/me"),
        ("PWD", "/home/me/work/password-manager"),
        ("OLDPWD", "/home/me"),
        ("LANG", "en_US.UTF-8"),
        ("SHELL", "/bin/bash"),
        ("GIT_AUTHOR_NAME", "Ada Lovelace"),
        ("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567"),
        ("INVOCATION_ID", "5f1c0e3a8b7d4c2e9f6a1b3c5d7e9f0a"),
        ("LS_COLORS", "rs=0:di=01;34:ln=01;36:*.tar=01;31:*.key=00;33"),
        ("BUILD_NAME", "Xenial64BuildAgentProfile2024"),
        ("API_BASE_URL", "https://api.example.com:8443/v1"),
        ("PYTHONPATH", "/srv/app/src:/srv/app/tokenizer"),
        ("XDG_SESSION_TYPE", "wayland"),
        ("TOKENIZERS_PARALLELISM", "false"),
        ("MANPATH", "/usr/share/man"),
    ],
)
def test_ordinary_values_are_shown(name: str, value: str) -> None:
    assert mask_value(name, value) == value
    assert not is_secret_variable(name, value)


RANDOM_TOKEN = "Xk9mQ2vR7pL4wN8sT1bY6cZ3dF5hJ0qA"  # mixed case and digits, no repeats


@pytest.mark.parametrize("length", range(24, 33))
def test_a_random_looking_value_of_24_characters_or_more_is_masked_whole(length: int) -> None:
    value = RANDOM_TOKEN[:length]
    assert mask_value("BUILD", value) == f"****** (masked, {length} characters)"
    assert is_secret_variable("BUILD", value)


def test_a_random_looking_value_is_judged_whole_and_by_its_length() -> None:
    assert mask_value("BUILD", RANDOM_TOKEN[:23]) == RANDOM_TOKEN[:23]  # too short to tell
    assert mask_value("BUILD", f"  {RANDOM_TOKEN[:24]}\n") == "****** (masked, 27 characters)"
    for length in (1024, 1025, 1624, MAX_SCAN):  # 1624: a base64 RSA-2048 key, no PEM lines
        value = (RANDOM_TOKEN * 3000)[:length]
        assert mask_value("BUILD", value) == f"****** (masked, {length} characters)"
        assert contains_secret(value)


@pytest.mark.parametrize(
    "value",
    [
        "/" + RANDOM_TOKEN,  # a path
        "." + RANDOM_TOKEN,
        RANDOM_TOKEN[:24] + "!",  # not a token's alphabet
        RANDOM_TOKEN[:12] + "#" + RANDOM_TOKEN[12:24],
        "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
        "the PRIVATE KEY file is /etc/ssl/private/site.key",
    ],
)
def test_values_that_only_look_like_secrets_are_shown(value: str) -> None:
    assert mask_value("BUILD", value) == value


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        # The class switches must reach 40% of the gaps between characters.
        ("ABCdef12GHIjk34LMNop56QRst", True),  # 10 switches in 25 gaps: exactly 40%
        ("ABCdef12GHIjk34LMNop56QRstu", False),  # 10 in 26: under
        # Upper case, lower case and digits must all be there.
        ("A1B2C3D4E5F6G7H8J9K0L1M2", False),
        # The character entropy must reach 3.5 bits.
        ("A1aE2eB1bE2eC1cE2eD1dE2eAbBcCdDa", True),  # 8 symbols twice, 4 four times: 3.5 bits
        ("aB3cD5eF7gH9aB3cD5eF7gH9", True),  # 12 symbols twice: 3.58 bits
        ("aA1aA1aA1aA1aA1aA1aA1aA1aA1", False),  # 3 symbols: 1.58 bits
    ],
)
def test_what_reads_as_random_at_each_threshold(value: str, masked: bool) -> None:
    shown = mask_value("BUILD", value)
    assert shown == (f"****** (masked, {len(value)} characters)" if masked else value)


def test_a_private_key_is_masked_whole_wherever_it_starts() -> None:
    pem = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg\n-----END EC PRIVATE KEY-----"
    for value in (pem, f"key:\n{pem}", f"{pem}\n# rotated yearly"):
        assert mask_value("BUILD", value) == f"****** (masked, {len(value)} characters)"


@pytest.mark.parametrize(
    "value",
    [
        "key_" * 20_000,
        "-" * 70_000,
        "_" * 70_000,
        "x.key" * 16_000,
        "a://b:" * 12_000,
        "https://" + "a:" * 30_000 + "@",
        "eyJ" * 25_000,
        "eyJaaaaa." * 8_000,
        "sk-" * 25_000,
        "Bearer " * 10_000,
        '"key":' * 12_000,
        '"key": "' + "\\x" * 30_000,
        "--key " * 12_000,
        "key=" * 18_000,
        "authorization: " * 5_000,
        "-----BEGIN RSA PRIVATE KEY-----" * 2_000,
        "A" * 70_000,
        "aB3" * 23_000,
    ],
)
def test_masking_is_linear_on_hostile_values(value: str) -> None:
    def mask() -> None:
        mask_value("X", value)
        redact(value)
        redact(value * 4)

    assert cpu_seconds(mask) < 3.0


def test_an_overlong_value_is_masked_whole() -> None:
    value = "a" * (MAX_SCAN + 1)
    assert mask_value("X", value).startswith("****** (masked, ")
    assert is_secret_variable("X", value)


async def test_the_env_tool_masks_off_the_event_loop() -> None:
    hostile = {f"V{i}": ("key_" * 16_000) + f"sk-{'a' * 20}" for i in range(20)}
    hostile["PLAIN"] = "visible"
    hostile["URL"] = "postgres://u:p@ss/w@rd@host/db"
    async with heartbeat() as beat:
        out = (await EnvTool(environ=hostile, max_value_chars=100_000).run()).content
    assert beat.max_stall < 0.1, beat
    assert "PLAIN=visible" in out
    assert "URL=postgres://u:******@host/db" in out
    assert "sk-aaaa" not in out


# -- bash: the host's secrets do not reach the command ---------------------------------------

HOST_SECRETS = {
    "OPENAI_API_KEY": "sk-proj-hostsecret0001abcdefghij",
    "ANTHROPIC_API_KEY": "sk-ant-api03-hostsecret0002abcdef",
    "AWS_SECRET_ACCESS_KEY": "hostsecret0003/K7MDENG/bPxRfiCY",
    "AWS_ACCESS_KEY_ID": "AKIAHOSTSECRET000004",
    "DATABASE_URL": "postgres://u:hostsecret0005@h/db",
    "REDIS_URL": "redis://:hostsecret0006@cache:6379/0",
    "GITHUB_TOKEN": "ghp_hostsecret0007abcdefghijklmnopqrstu",
    "FANLOOP_TEST_JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJob3N0c2VjcmV0MDAwOCJ9.c2lnbmF0dXJl",
    "FANLOOP_TEST_CONFIG": '{"client_secret": "hostsecret0009"}',
    "SSH_AUTH_SOCK": "/tmp/ssh-hostsecret0010/agent.1",
    "NPM_CONFIG__AUTHTOKEN": "hostsecret0011",
}


@pytest.fixture
def host_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in HOST_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("FANLOOP_TEST_PLAIN", "plain-value")


@pytest.mark.usefixtures("host_secrets")
async def test_bash_does_not_pass_the_hosts_secrets(ws: Path) -> None:
    out = (await BashTool(root=ws).run(command="env")).content
    assert "hostsecret" not in out
    for name in HOST_SECRETS:
        assert f"\n{name}=" not in f"\n{out}"
    for name in ("PATH", "HOME", "LANG", "FANLOOP_TEST_PLAIN"):
        assert f"\n{name}=" in f"\n{out}"
    assert "\nPAGER=cat\n" in f"\n{out}"


@pytest.mark.usefixtures("host_secrets")
async def test_bash_passes_what_the_host_allows(ws: Path) -> None:
    tool = BashTool(
        root=ws,
        env_passthrough=("GITHUB_TOKEN",),
        env={"MY_SERVICE_TOKEN": "given-explicitly"},
    )
    out = (await tool.run(command="env")).content
    assert f"GITHUB_TOKEN={HOST_SECRETS['GITHUB_TOKEN']}" in out
    assert "MY_SERVICE_TOKEN=given-explicitly" in out
    assert "OPENAI_API_KEY" not in out
    everything = (await BashTool(root=ws, inherit_env=True).run(command="env")).content
    assert f"OPENAI_API_KEY={HOST_SECRETS['OPENAI_API_KEY']}" in everything


def test_scrub_environ_keeps_named_variables() -> None:
    environ = {"PATH": "/bin", "API_KEY": "k", "URL": "https://u:p@h/"}
    assert scrub_environ(environ) == {"PATH": "/bin"}
    assert scrub_environ(environ, keep=["API_KEY"]) == {"PATH": "/bin", "API_KEY": "k"}


async def test_bash_refuses_a_nul_byte(ws: Path) -> None:
    with pytest.raises(ToolError, match="NUL byte"):
        await BashTool(root=ws).run(command="echo a\x00b")
