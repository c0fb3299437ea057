"""The embedded simulator: an in-memory cluster replaying a workload through the core."""
