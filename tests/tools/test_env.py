"""The env tool: reading variables with sensitive values masked."""

from __future__ import annotations

import pytest

from fanloop.tools import EnvTool
from fanloop.tools.env import is_sensitive_name, mask_value


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "PGPASSWORD",
        "MYSQL_PWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "SSH_PRIVATE_KEY",
        "BASIC_AUTH",
        "SESSION_COOKIE",
        "SENTRY_DSN",
        "DATABASE_URL",
        "api_key",
    ],
)
def test_sensitive_names(name: str) -> None:
    assert is_sensitive_name(name)


@pytest.mark.parametrize(
    "name", ["HOME", "PATH", "PWD", "OLDPWD", "LANG", "GIT_AUTHOR_NAME", "EDITOR", "SHELL"]
)
def test_harmless_names(name: str) -> None:
    assert not is_sensitive_name(name)


def test_values_that_look_like_secrets_are_masked() -> None:
    assert mask_value("X", "sk-abcdef123") == "****** (masked, 12 characters)"
    assert mask_value("X", "ghp_abc") == "****** (masked, 7 characters)"
    assert mask_value("X", "-----BEGIN RSA PRIVATE KEY-----\nabc").startswith("******")
    assert mask_value("REDIS", "redis://user:hunter2@host:6379/0") == (
        "redis://user:******@host:6379/0"
    )
    assert mask_value("EDITOR", "vim") == "vim"
    assert mask_value("API_KEY", "") == "(empty)"


async def test_env_tool() -> None:
    env = {"HOME": "/home/me", "MY_API_KEY": "abc123", "APP_MODE": "dev", "APP_TOKEN": "t0k"}
    tool = EnvTool(environ=env)
    assert not tool.dangerous
    assert (await tool.run(names=["HOME", "MY_API_KEY", "NOPE"])).content == (
        "HOME=/home/me\nMY_API_KEY=****** (masked, 6 characters)\nNOPE is not set"
    )
    assert (await tool.run(prefix="APP_")).content == (
        "APP_MODE=dev\nAPP_TOKEN=****** (masked, 3 characters)"
    )
    assert (await tool.run(prefix="ZZZ")).content == "No environment variables starting with 'ZZZ'."
    everything = (await tool.run()).content
    assert "abc123" not in everything
    assert "t0k" not in everything


async def test_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FANLOOP_TEST_SECRET", "s3cr3t")
    monkeypatch.setenv("FANLOOP_TEST_PLAIN", "x" * 1000)
    result = (await EnvTool().run(prefix="FANLOOP_TEST_")).content
    assert "s3cr3t" not in result
    assert "FANLOOP_TEST_SECRET=****** (masked, 6 characters)" in result
    assert "[value truncated: showing 500 of 1,000 characters]" in result
