"""The capture stage: pcap / pcapng files (plain or gzip) -> Arrow batches of TCP segments.

Public API: `identify`, `capture_id`, `Split`, `plan_splits`, `read_split` (see their docstrings),
plus `parse_stats` to read the closing stats batch of a split and `SplitOrder` to order the
packets of a file read in several splits as one read would.
"""

from .decode import PacketDecoder, SplitOrder, parse_stats
from .files import Split, capture_id, identify, plan_splits
from .reader import read_split

__all__ = [
    "PacketDecoder",
    "Split",
    "SplitOrder",
    "capture_id",
    "identify",
    "parse_stats",
    "plan_splits",
    "read_split",
]
