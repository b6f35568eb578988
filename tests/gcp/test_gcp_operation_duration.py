"""An operation's duration by the API's own metadata (createTime to endTime)."""

from __future__ import annotations

import pytest

from tpucared.gcp.tpu import Operation


@pytest.mark.parametrize(
    ("metadata", "seconds"),
    [
        ({"createTime": "2026-11-25T10:00:00Z", "endTime": "2026-11-25T10:00:02Z"}, 2.0),
        (
            {
                "createTime": "2026-11-25T10:00:00.123456789Z",
                "endTime": "2026-11-25T10:00:02.623456789Z",
            },
            2.5,
        ),
        ({"createTime": "2026-11-25T10:00:00.5+01:00", "endTime": "2026-11-25T09:00:01Z"}, 0.5),
        ({"createTime": "2026-11-25T10:00:00Z"}, None),  # still running
        ({"createTime": "yesterday", "endTime": "today"}, None),
        ({"createTime": "2026-11-25T10:00:02Z", "endTime": "2026-11-25T10:00:00Z"}, None),
    ],
)
def test_duration(metadata: dict[str, str], seconds: float | None) -> None:
    op = Operation(name="operations/x", done=True, metadata=metadata)
    if seconds is None:
        assert op.duration_s is None
    else:
        assert op.duration_s == pytest.approx(seconds)
