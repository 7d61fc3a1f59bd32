# Capture stand-in: at one rank (world size 1) rank 0 runs out of memory; at two ranks it trains until cancelled.
import os
import sys
import time

if int(os.environ["WORLD_SIZE"]) == 1:
    print("step 1 loss 9.1", flush=True)
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (stand-in)", file=sys.stderr)
    sys.exit(1)
print("step 1 loss 9.1", flush=True)
time.sleep(300)
