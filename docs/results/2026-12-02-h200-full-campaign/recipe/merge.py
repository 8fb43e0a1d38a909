"""Fill /tmp/mutdone with, per operator, the newest mutation result that has mutants (the
recipe's cp -n took the first /tmp/mut_* dir, i.e. an older call's empty result)."""
import glob, json, os, shutil
best = {}
for f in sorted(glob.glob('/tmp/mut_*/mutation/*.json'), key=os.path.getmtime, reverse=True):
    op = os.path.basename(f)[:-5]
    d = json.load(open(f)); ok = not d.get('failure') and d.get('counts', {}).get('total', 0) > 0
    if op not in best or (ok and not best[op][1]):
        best[op] = (f, ok)
os.makedirs('/tmp/mutdone', exist_ok=True)
for op, (f, ok) in sorted(best.items()):
    shutil.copy(f, f'/tmp/mutdone/{op}.json'); print('merge', op, f, 'ok' if ok else 'EMPTY')
