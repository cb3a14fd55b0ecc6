"""The optional worker registry (X4)."""

from __future__ import annotations

from taskrunner.queue import WorkerInfo

from ..scenario import ConformanceBase, Scenario, conformance

__all__ = ["RegistryCases"]


_Entry = tuple[int, int, float | None, int | None, int | None]


def _view(infos: list[WorkerInfo]) -> dict[str, _Entry]:
    return {
        i.instance: (i.workers, i.busy, i.average_seconds, i.succeeded, i.failed) for i in infos
    }


class RegistryCases(ConformanceBase):
    """X4."""

    @conformance("X4")
    async def test_worker_entries_are_listed_until_their_ttl_passes_without_a_refresh(
        self, s: Scenario
    ) -> None:
        """Publish refreshes in place, remove is idempotent, an unrefreshed entry expires."""
        mine, theirs = s.require_registry(), s.require_registry(await s.open())
        ttl = s.lease
        now = 1_767_225_600.0
        # Counts as a worker publishes them (None: a worker that publishes none).
        await mine.publish_worker(
            WorkerInfo(instance="w1", workers=4, busy=1, average_seconds=None, seen_at=now),
            ttl_seconds=ttl,
        )
        await theirs.publish_worker(
            WorkerInfo(
                instance="w2",
                workers=8,
                busy=0,
                average_seconds=0.5,
                seen_at=now,
                succeeded=2**40,
                failed=0,
            ),
            ttl_seconds=ttl,
        )
        assert _view(await mine.live_workers()) == {
            "w1": (4, 1, None, None, None),
            "w2": (8, 0, 0.5, 2**40, 0),
        }, "published fields did not come back as published"

        await mine.publish_worker(
            WorkerInfo(
                instance="w1",
                workers=4,
                busy=3,
                average_seconds=0.2,
                seen_at=now,
                succeeded=17,
                failed=3,
            ),
            ttl_seconds=10 * ttl,
        )
        assert _view(await theirs.live_workers()) == {
            "w1": (4, 3, 0.2, 17, 3),
            "w2": (8, 0, 0.5, 2**40, 0),
        }, "a refresh did not replace the entry's fields"

        await s.advance(ttl + s.margin)
        assert _view(await theirs.live_workers()) == {"w1": (4, 3, 0.2, 17, 3)}, (
            "an entry outlived its TTL"
        )
        await theirs.remove_worker("w1")
        await theirs.remove_worker("w1")
        await theirs.remove_worker("never published")
        assert await mine.live_workers() == []
