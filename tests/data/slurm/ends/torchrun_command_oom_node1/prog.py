# Capture stand-in: rank 3 (node 1 of 2, two ranks a node) runs out of memory; the others wait for it.
import os
import sys
import time

print(f"rank {os.environ['RANK']} step 1 loss 9.1", flush=True)
if os.environ["RANK"] == "3":
    time.sleep(2)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (stand-in)", file=sys.stderr)
    sys.exit(1)
time.sleep(300)
