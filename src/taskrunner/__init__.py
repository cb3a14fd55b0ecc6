"""taskrunner: an asyncio task queue with leases, heartbeats and pluggable backends."""
