"""A finished decode task gives the heap it freed back to the OS (pipeline.give_back_memory)."""

import subprocess
import sys

import pytest

# In a fresh interpreter: 200 MB of 4 KB buffers (glibc heap, below the mmap threshold), all freed
# but the last, which pins the heap's top so free() alone cannot shrink it.
SCRIPT = """
import sys
from brokerscope import pipeline

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

bufs = [bytearray(4096) for _ in range(50_000)]
last = bufs[-1]
del bufs
before = rss_mib()
pipeline.give_back_memory()
after = rss_mib()
print(before, after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc's malloc_trim")
def test_freed_heap_goes_back_to_the_os():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    assert before - after > 150, (before, after)
