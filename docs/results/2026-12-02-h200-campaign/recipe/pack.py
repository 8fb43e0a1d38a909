"""Pack a campaign directory's state for the next call: campaign.json, plus the unit files of
kernels that campaign.json does not hold yet (if they fit), into one tgz."""
import json, os, sys, tarfile
import numpy as np
d, out = sys.argv[1], sys.argv[2]
limit = 14 * 2**20
done = set()
if os.path.exists(f"{d}/campaign.json"):
    done = set(json.load(open(f"{d}/campaign.json")).get("correct", {}))
keep, size = [], 0
ud = f"{d}/units"
if os.path.isdir(ud):
    for f in sorted(os.listdir(ud)):
        if not f.endswith(".npz"):
            continue
        p = f"{ud}/{f}"
        with np.load(p, allow_pickle=False) as z:
            spec = json.loads(str(z["meta"]))["unit_spec"]
        if f"{spec['op']}/{spec['kernel']}" not in done:
            keep.append(p); size += os.path.getsize(p)
if size > limit:
    print(f"pack: {len(keep)} partial units ({size/2**20:.1f} MiB) left out; they will run again")
    keep = []
with tarfile.open(out, "w:gz") as t:
    for name in ("campaign.json",):
        if os.path.exists(f"{d}/{name}"):
            t.add(f"{d}/{name}", arcname=f"camp/{name}")
    for p in keep:
        t.add(p, arcname="camp/units/" + os.path.basename(p))
print(f"pack: {len(done)} kernels done, {len(keep)} partial units kept")
