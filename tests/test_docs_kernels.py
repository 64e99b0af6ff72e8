"""The docs build's kernel start (docs/_ext/bnfl_docs.py, :func:`start_kernel`): a kernel that dies
at start (a port collision: "zmq.error.ZMQError: Address already in use", then "Kernel died before
replying to kernel_info", which errored 97 docs tests in one CI run) is started again on a new
manager, a bounded number of times, then stops the build with a clear error. Fake managers: no
kernel starts here (tests/test_docs.py runs real ones)."""

from __future__ import annotations

import asyncio

import pytest


class FakeClient:
    def __init__(self, km: FakeManager) -> None:
        self.km = km

    def start_channels(self) -> None:
        self.km.channels += 1

    def stop_channels(self) -> None:
        self.km.channels -= 1

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        if self.km.fate == "dies":  # what jupyter_client raises when the kernel process has exited
            self.km.alive = False
            raise RuntimeError("Kernel died before replying to kernel_info")
        if self.km.fate == "silent":
            raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")


class FakeManager:
    """An AsyncKernelManager's surface as start_kernel uses it; ``fate``: ok, dies or silent."""

    def __init__(self, fate: str) -> None:
        self.fate, self.alive, self.channels = fate, False, 0
        self.started: dict | None = None
        self.shut = False

    async def start_kernel(self, **kw) -> None:
        self.started, self.alive = kw, True

    def client(self) -> FakeClient:
        return FakeClient(self)

    async def is_alive(self) -> bool:
        return self.alive

    async def shutdown_kernel(self, now: bool = False) -> None:
        self.shut, self.alive = True, False


def _start(bnfl_docs, fates: list[str], **kw):
    made: list[FakeManager] = []

    def make() -> FakeManager:
        made.append(FakeManager(fates[len(made)]))
        return made[-1]

    return made, asyncio.run(bnfl_docs.start_kernel(make, cwd="/tmp/somewhere", **kw))


def test_a_kernel_that_dies_at_start_is_started_again_on_a_new_manager(bnfl_docs):
    made, km = _start(bnfl_docs, ["dies", "ok"])
    assert km is made[1] and len(made) == 2
    assert made[0].shut and not made[1].shut  # the dead one cleaned up, the live one handed over
    assert made[1].started["cwd"] == "/tmp/somewhere" and made[1].alive
    assert [m.channels for m in made] == [0, 0]  # the probe's channels closed both times


def test_a_kernel_that_keeps_dying_stops_the_build_after_the_last_attempt(bnfl_docs):
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match=r"died at start 3 times .*Kernel died before replying to kernel_info"):
        _start(bnfl_docs, ["dies"] * 5)
    with pytest.raises(ExtensionError, match="died at start 2 times"):
        _start(bnfl_docs, ["dies"] * 5, attempts=2)
    made: list[FakeManager] = []
    with pytest.raises(ExtensionError):
        asyncio.run(bnfl_docs.start_kernel(lambda: made.append(FakeManager("dies")) or made[-1], cwd="."))
    assert len(made) == bnfl_docs.KERNEL_START_ATTEMPTS == 3 and all(m.shut for m in made)


def test_a_live_kernel_that_does_not_answer_is_not_retried(bnfl_docs):
    from sphinx.errors import ExtensionError

    made: list[FakeManager] = []
    with pytest.raises(ExtensionError, match=r"did not start: RuntimeError: Kernel didn't respond in 5 seconds"):
        asyncio.run(bnfl_docs.start_kernel(lambda: made.append(FakeManager("silent")) or made[-1], cwd=".",
                                           ready_timeout=5))
    assert len(made) == 1 and made[0].shut
    with pytest.raises(ValueError, match="attempts"):
        asyncio.run(bnfl_docs.start_kernel(lambda: FakeManager("ok"), cwd=".", attempts=0))
