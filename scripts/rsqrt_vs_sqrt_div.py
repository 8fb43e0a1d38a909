"""Is 1.0 / tl.sqrt(x) (sqrt.approx.ftz then div.full on NVIDIA) within the profile's rsqrt bound?

Every fp32 bit pattern from LO to HI (hex; default every positive normal, 0x00800000 to
0x7F7FFFFF, 2,130,706,432 values) on the GPU at hand: 1.0/tl.sqrt(x), tl.math.rsqrt(x) and the
parts, tl.sqrt(x) and 1.0/x, each against the float64 value in the calculus's unit (the fp32 ulp
of the exact value's binade, 2^-149 below 2^-126: calculus.tracked._library_error). Prints JSON:
the PTX instructions used, per function the largest error and where, and a histogram of the
1/sqrt errors (hist[i]: edges[i-1] < err <= edges[i]). Written compactly to travel on a command
line to the GPU machine. Subnormal x are outside rsqrt's domain under FTZ and left out.

    python scripts/rsqrt_vs_sqrt_div.py [LO HI]

Results: docs/results/2026-12-02-plan-1oversqrt.md
"""
import torch,triton,triton.language as tl,json,re
@triton.jit
def k(s,n,a,b,c,d,B:tl.constexpr):
 o=tl.program_id(0)*B+tl.arange(0,B);m=o<n;x=(s+o).to(tl.float32,bitcast=True)
 tl.store(a+o,1.0/tl.sqrt(x),mask=m);tl.store(b+o,tl.math.rsqrt(x),mask=m);tl.store(c+o,tl.sqrt(x),mask=m);tl.store(d+o,1.0/x,mask=m)
def U(g,e):
 q=torch.floor(torch.log2(e));q=torch.where(torch.exp2(q)>e,q-1,q).clamp(min=-126);return (g.double()-e).abs()/torch.exp2(q-23)
import sys
lo,hi=(int(a,16) for a in sys.argv[1:3]) if len(sys.argv)>2 else (0x00800000,0x7F7FFFFF)
C=1<<27;N=("1/sqrt","rsqrt","sqrt","recip");W={i:(0.,0.) for i in N}
E=torch.tensor([.5,1,1.25,1.5,1.75,1.90625,2,2.25,2.5,3],device="cuda",dtype=torch.float64);H=torch.zeros(11,dtype=torch.int64,device="cuda")
bf=[torch.empty(C,device="cuda") for _ in N];s=lo;T=0
while s<=hi:
 n=min(C,hi-s+1);ck=k[(triton.cdiv(n,1024),)](s,n,*bf,B=1024)
 x=(torch.arange(n,device="cuda")+s).to(torch.int32).view(torch.float32).double();r=1/torch.sqrt(x)
 for i,b,e in zip(N,bf,(r,r,torch.sqrt(x),1/x)):
  u=U(b[:n],e);v,j=u.max(0)
  if float(v)>W[i][0]:W[i]=(float(v),float(x[j]))
  if i=="1/sqrt":H+=torch.bincount(torch.bucketize(u,E),minlength=11)
 T+=n;s+=n
p=sorted(set(re.findall(r"\b((?:sqrt|rsqrt|div|rcp)\.[a-z0-9.]+)",ck.asm["ptx"])))
print(json.dumps({"range":[hex(lo),hex(hi)],"dev":torch.cuda.get_device_name(0),"triton":triton.__version__,"ptx":p,"n":T,"max_ulp_at":W,"edges":E.tolist(),"hist":H.tolist()}))
