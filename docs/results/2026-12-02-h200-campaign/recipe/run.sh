# one call of the campaign: TLIM (s), CASES, NW (correct-stage workers), K (mutation processes), RC (replay cases)
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
cd .gpu/src && export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
[ -d /tmp/site/liger_kernel ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site ../whl/*.whl
mkdir -p /tmp/logs /tmp/mutdone
if [ ! -f /tmp/camp/campaign.json ] && [ -f ../state/camp_state.tgz ]; then tar xzf ../state/camp_state.tgz -C /tmp; echo "restored camp"; fi
if [ -f ../state/mut.tgz ]; then tar xzf ../state/mut.tgz -C /tmp; fi
CALL=$(date +%H%M%S)
ALL=$(python3 -c "import numoracle.operators as o; print(' '.join(o.names()))"); [ -n "${OPS:-}" ] && ALL=${OPS//,/ }
TODO=(); for op in $ALL; do [ -f /tmp/mutdone/$op.json ] || TODO+=($op); done
echo "t=$(el) mutation ops to do: ${#TODO[@]}"
MB=$((TLIM-100)); pids=()
if [ ${#TODO[@]} -gt 0 ] && [ $MB -gt 60 ]; then
 for k in $(seq 0 $((K-1))); do
  g=(); for i in "${!TODO[@]}"; do [ $((i % K)) -eq $k ] && g+=(${TODO[$i]}); done
  [ ${#g[@]} -eq 0 ] && continue
  ops=$(IFS=,; echo "${g[*]}")
  (timeout $((TLIM-45)) python3 -m numoracle campaign --backend ${BK:-gpu} ${OPS:+--ops $OPS} --stages mutation --out /tmp/mut_${CALL}_$k --mutation-ops $ops --max-mutants ${MM:-20} --mutation-seconds $MB 2>&1 | python3 -u ../ts.py > /tmp/logs/mut_${CALL}_$k.log) &
  pids+=($!)
 done
fi
if ! python3 -c "import json,sys; d=json.load(open('/tmp/camp/campaign.json')); sys.exit(0 if 'correct' in d.get('executor',{}) else 1)" 2>/dev/null; then
 NO_PAR=$NW timeout $((TLIM-60-$(el))) python3 ../par.py campaign --backend ${BK:-gpu} ${OPS:+--ops $OPS} --cases $CASES --stages correct --executor local --workers $NW --out /tmp/camp >> /tmp/logs/correct_$CALL.log 2>&1 &
 cpid=$!; seen=0; n=0
 while kill -0 $cpid 2>/dev/null; do
  sleep 3; n=$((n+1))
  [ $((n % 10)) = 0 ] && echo "t=$(el) kernels done $(grep -c '^\[correct\]' /tmp/logs/correct_$CALL.log)" >> /tmp/logs/progress_$CALL.log
  if grep -q "^kernel_errors:" /tmp/logs/correct_$CALL.log; then seen=$((seen+3)); fi
  if [ $seen -ge 20 ]; then echo "t=$(el) correct stage printed its summary 20 s ago but has not exited: ending it (pid $cpid)"; kill -TERM $cpid; sleep 3; fi
 done
 wait $cpid; echo "t=$(el) correct ended"; grep -v Deprecation /tmp/logs/correct_$CALL.log | grep -v "os.fork" | tail -8
fi
LEFT=$((TLIM-40-$(el)))
DONE_C=$(python3 -c "import json,sys; d=json.load(open('/tmp/camp/campaign.json')); print(1 if 'correct' in d.get('executor',{}) else 0)" 2>/dev/null || echo 0)
DONE_R=$(python3 -c "import json; d=json.load(open('/tmp/camp/campaign.json')); print(1 if 'replays' in d.get('done',[]) else 0)" 2>/dev/null || echo 0)
echo "t=$(el) left=$LEFT correct_done=$DONE_C replays_done=$DONE_R"
if [ "$DONE_C" = 1 ] && [ "$DONE_R" = 0 ]; then
 RC=${RC:-44}; [ $LEFT -lt 250 ] && [ $RC -gt 22 ] && RC=22
 if [ $LEFT -ge 140 ]; then
  cp /tmp/camp/campaign.json /tmp/campaign.before_replays.json
  timeout $((LEFT-10)) python3 -m numoracle campaign --backend ${BK:-gpu} ${OPS:+--ops $OPS} --stages replays --replay-cases $RC --out /tmp/camp 2>&1 | python3 -u ../ts.py > /tmp/logs/replays_$CALL.log
  r=${PIPESTATUS[0]}; echo "t=$(el) replays rc=$r"; tail -22 /tmp/logs/replays_$CALL.log | cut -c1-220
  if ! python3 -c "import json,sys; sys.exit(0 if 'replays' in json.load(open('/tmp/camp/campaign.json')).get('done',[]) else 1)"; then cp /tmp/campaign.before_replays.json /tmp/camp/campaign.json; echo "replays cut: state restored"; fi
 fi
fi
for p in "${pids[@]}"; do wait $p; done
echo "t=$(el) mutation processes ended"
for f in /tmp/mut_*/mutation/*.json; do [ -f "$f" ] && cp -n "$f" /tmp/mutdone/; done
python3 - <<'PY'
import json,glob,os
for f in sorted(glob.glob('/tmp/mutdone/*.json')):
    d=json.load(open(f)); c=d.get('counts',{})
    print(os.path.basename(f)[:-5], d.get('failure') or f"mutants {c.get('total')} eff {c.get('effective')} kills {c.get('kills',{}).get('numoracle')} ({d.get('seconds')}s)")
PY
MISSING=0; for op in $ALL; do [ -f /tmp/mutdone/$op.json ] || MISSING=$((MISSING+1)); done
DONE_R=$(python3 -c "import json; d=json.load(open('/tmp/camp/campaign.json')); print(1 if 'replays' in d.get('done',[]) else 0)" 2>/dev/null || echo 0)
echo "t=$(el) mutation missing=$MISSING replays_done=$DONE_R"
if [ $MISSING = 0 ] && [ "$DONE_R" = 1 ] || [ "${FINAL:-0}" = 1 ]; then
 mkdir -p /tmp/camp/mutation; cp /tmp/mutdone/*.json /tmp/camp/mutation/ 2>/dev/null
 HAVE=$(ls /tmp/camp/mutation | sed 's/\.json$//' | paste -sd,)
 python3 -m numoracle campaign --backend ${BK:-gpu} ${OPS:+--ops $OPS} --stages mutation --mutation-ops "$HAVE" --mutation-seconds 1 --out /tmp/camp --report 2>&1 | python3 -u ../ts.py > /tmp/logs/final_$CALL.log
 echo "t=$(el) final rc=${PIPESTATUS[0]}"; tail -20 /tmp/logs/final_$CALL.log
 cp /tmp/camp/campaign.json /tmp/camp/report.md /tmp/camp/report.html $OUT/ 2>/dev/null
fi
python3 ../pack.py /tmp/camp $OUT/camp_state.tgz
tar czf $OUT/mut.tgz -C /tmp mutdone
tar czf $OUT/logs.tgz -C /tmp logs
echo "t=$(el) packed"; ls -la $OUT
