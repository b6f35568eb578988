"""The fan-out benchmark's settings, the constants its parts share, and its bounds."""

from __future__ import annotations

from dataclasses import dataclass

PARALLEL_SSH = "parallel-ssh"
WORKLOAD = "sleep 30"
TAG = "TPUCARED_BENCH_TAG"
TARGET_WORKERS, TARGET_SECONDS = 256, 5.0
# OpenSSH 9.x clients and servers agree on sntrup761x25519-sha512 (post-quantum) by default;
# asyncssh (without liboqs) and OpenSSH 9.2 agree on this one. The variant isolates the tools
# from their key exchange.
CLASSIC_KEX = "curve25519-sha256"

# Bounds: no measurement may take longer than this (a hung worker fails the run instead of
# hanging it); Settings refuses sizes and repetition counts beyond a sane budget.
MEASUREMENT_TIMEOUT_S = 180.0
# After a launch: how long to wait for every workload to show up before killing them.
WORKLOAD_APPEAR_S = 10.0
PAUSE_BETWEEN_RUNS_S = 0.5


@dataclass(frozen=True)
class Settings:
    workers: tuple[int, ...]
    reps: int
    fleets: tuple[str, ...] = ("sshd", "emulator")
    commands: tuple[str, ...] = ("true", "launch")
    concurrencies: tuple[int, ...] = (64, 256)
    sequential_max_workers: int = 64  # the ssh loop runs up to here and is extrapolated above
    warm: bool = True
    # Also run parallel-ssh with the key exchange tpucared gets from sshd (see CLASSIC_KEX).
    openssh_classic_kex: bool = True

    def __post_init__(self) -> None:
        if not self.workers or min(self.workers) < 1 or max(self.workers) > 1000:
            raise ValueError("workers must be in 1..1000")
        if not 1 <= self.reps <= 50:
            raise ValueError("reps must be in 1..50")
        if set(self.fleets) - {"sshd", "emulator"} or set(self.commands) - {"true", "launch"}:
            raise ValueError(f"unknown fleet or command in {self.fleets} / {self.commands}")


FULL = Settings(workers=(16, 64, 256), reps=5)
QUICK = Settings(workers=(16, 64), reps=2, sequential_max_workers=16)


def settings_for(quick: bool) -> Settings:
    return QUICK if quick else FULL
