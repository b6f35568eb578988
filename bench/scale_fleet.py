"""The scale benchmark's fleet: its project, owner label, zones, node type and how N nodes
spread over 4 fleets, one per zone. Shared by the emulator's seeding (scale_procs.py for TPU
API nodes, scale_api.py for Compute Engine instances), the daemon's config and the storm
(scale_storm.py); it imports nothing of the benchmark, so none of them import each other for it.
"""

PROJECT = "bench-project"
OWNER = "bench"
ZONES = ("us-central1-a", "us-east5-a", "us-south1-a", "europe-west4-b")
TYPE = "v5litepod-8"  # single host: one worker, one SSH server per node
RUNTIME = "v2-alpha-tpuv5-lite"


def fleet_layout(size: int) -> list[tuple[str, str, int]]:
    """(fleet, zone, slots): 4 fleets, one per zone, sizes summing to `size`."""
    base, extra = divmod(size, len(ZONES))
    return [(f"scale{i}", zone, base + (1 if i < extra else 0)) for i, zone in enumerate(ZONES)]
