import sys, time
t0 = time.time()
for line in sys.stdin:
    sys.stdout.write(f"{time.time()-t0:7.1f} {line}")
    sys.stdout.flush()
