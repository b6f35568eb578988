"""The `[[notify]]` tables and `daemon.events_retention`: what loads, and one line per mistake."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import config_support
import pytest

from tpucared.config import ConfigError, load_config
from tpucared.core.notify.spec import NotifyFormat, NotifyOn

SECRET_URL = "https://hooks.slack.com/services/T000/B000/XXXXsecretXXXX"


def _write(tmp_path: Path, extra: str, daemon: str = "") -> Path:
    path = tmp_path / "fleet.toml"
    path.write_text(config_support.daemon(daemon) + textwrap.dedent(extra), encoding="utf-8")
    return path


def _problems(tmp_path: Path, extra: str, daemon: str = "") -> list[str]:
    path = _write(tmp_path, extra, daemon)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [line.removeprefix(f"{path}: ") for line in str(info.value).splitlines()]


def test_no_notify_and_the_default_retention(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, ""))
    assert config.notify == ()
    assert config.daemon.events_retention == 30 * 86400


@pytest.mark.parametrize(("value", "seconds"), [('"7d"', 7 * 86400), ('"never"', None)])
def test_events_retention(tmp_path: Path, value: str, seconds: float | None) -> None:
    config = load_config(_write(tmp_path, "", daemon=f"events_retention = {value}"))
    assert config.daemon.events_retention == seconds


def test_a_retention_shorter_than_a_day_is_refused(tmp_path: Path) -> None:
    found = _problems(tmp_path, "", daemon='events_retention = "2h"')
    assert found == ['daemon.events_retention: expected "1d" or more, or "never", got "2h"']


def test_webhooks_load_with_their_defaults(tmp_path: Path) -> None:
    config = load_config(
        _write(
            tmp_path,
            f"""
            [[notify]]
            url = "{SECRET_URL}"

            [[notify]]
            name = "pager"
            url_env = "PAGER_WEBHOOK"
            format = "json"
            on = ["notice", "unhealthy"]
            stockout_after = "2h"
            min_interval = "1m"
            """,
        )
    )
    slack, pager = config.notify
    assert (slack.name, slack.url, slack.url_env) == ("notify-1", SECRET_URL, None)
    assert slack.format is NotifyFormat.SLACK
    assert slack.on == frozenset(NotifyOn)
    assert (slack.stockout_after, slack.min_interval) == (
        timedelta(minutes=30),
        timedelta(minutes=10),
    )
    assert (pager.name, pager.url, pager.url_env) == ("pager", None, "PAGER_WEBHOOK")
    assert pager.format is NotifyFormat.JSON
    assert pager.on == {NotifyOn.NOTICE, NotifyOn.UNHEALTHY}
    assert (pager.stockout_after, pager.min_interval) == (timedelta(hours=2), timedelta(minutes=1))
    assert SECRET_URL not in repr(config)  # the url is a credential


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("[[notify]]\n", ["notify[0]: expected one of url or url_env"]),
        (
            f'[[notify]]\nurl = "{SECRET_URL}"\nurl_env = "X"\n',
            ["notify[0]: expected one of url or url_env"],
        ),
        (
            '[[notify]]\nurl = "ftp://secret-host/x"\n',
            ['notify[0].url: expected an "https://host/..." url (not shown: secret)'],
        ),
        ('[[notify]]\nurl_env = "lower case"\n', ["notify[0].url_env: expected"]),
        ('[[notify]]\nurl_env = "A"\nformat = "xml"\n', ["notify[0].format: "]),
        ('[[notify]]\nurl_env = "A"\non = ["paging"]\n', ["notify[0].on[0]: "]),
        ('[[notify]]\nurl_env = "A"\non = []\n', ["notify[0].on: expected at least one kind"]),
        (
            '[[notify]]\nurl_env = "A"\nmin_interval = "1s"\n',
            ['notify[0].min_interval: expected "10s"'],
        ),
        ('[[notify]]\nurl_env = "A"\nchannel = "#x"\n', ["notify[0].channel: "]),
        (
            '[[notify]]\nurl_env = "A"\n[[notify]]\nurl_env = "B"\nname = "notify-1"\n',
            ["notify: name 'notify-1' used by more than one [[notify]]"],
        ),
    ],
)
def test_bad_webhooks(tmp_path: Path, extra: str, expected: list[str]) -> None:
    found = _problems(tmp_path, extra)
    for want in expected:
        assert any(line.startswith(want) for line in found), (want, found)
    assert not any("secret" in line.lower() and "not shown" not in line for line in found), found
