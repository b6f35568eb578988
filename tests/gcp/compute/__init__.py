"""Tests of the Compute Engine adapter (tpucared/gcp/compute): pure parts and, against the
emulator over loopback, the client and `ComputeCloud`."""
