set -u
cd .gpu/src && export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site ../whl/*.whl
nvidia-smi -L; nproc
python3 -c "import torch,triton,liger_kernel,scipy,mpmath,ml_dtypes,hypothesis;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())"
T() { local n=$1; shift; local t0=$(date +%s.%N); "$@" 2>&1 | python3 -u ../ts.py > $OUT/$n.log; local rc=${PIPESTATUS[0]}; echo "== $n rc=$rc $(python3 -c "import time;print(round(time.time()-$t0,1))")s"; tail -n ${TAILN:-8} $OUT/$n.log | cut -c1-400; }
T plan timeout 40 python3 -m numoracle plan rms_norm --arch device
TAILN=25 T fuzz timeout 45 python3 -m numoracle fuzz rms_norm --backend gpu --seconds 15 --json
T c1 timeout 45 python3 -m numoracle campaign --backend gpu --ops rms_norm --cases 11 --stages correct --out /tmp/c1
export NO_PAR=12 OMP_NUM_THREADS=1
TAILN=40 T c2 timeout 75 python3 ../par.py campaign --backend gpu --ops rms_norm,softmax,mxfp8_quantize,cross_entropy,layer_norm_backward,mx_scaled_matmul,swiglu --cases 22 --stages correct --executor local --workers 12 --out /tmp/c2
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv
python3 -c "
import json
for d in ('/tmp/c1','/tmp/c2'):
  try: j=json.load(open(d+'/campaign.json'))
  except Exception as e: print(d,e); continue
  c=j.get('correct',{}); print(d,'kernels',len(c),'runs',sum(v.get('cases',0) for v in c.values()),'unitsec',round(sum(v.get('seconds',0) for v in c.values()),1), j.get('executor'))
"
ls /tmp/c2/units | wc -l; du -sh /tmp/c2
