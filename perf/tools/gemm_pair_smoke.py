import torch, cute_ops, time
from cute_ops import reference as ref
for m, pol, gran, split in [(1,'sequential','tile',None),(64,'overlap','tile',None),(300,'row_interleaved','row',0),(5,'sequential','row',64)]:
    a = torch.randn(m, 264, device='cuda', dtype=torch.bfloat16)
    b0 = (torch.randn(400, 264, device='cuda')/16).bfloat16()
    b1 = (torch.randn(136, 200, device='cuda')/10).bfloat16()
    out = cute_ops.gemm_pair(a, b0, b1, policy=pol, granularity=gran, split_k1=split)
    torch.cuda.synchronize()
    e = ref.gemm_pair(a.double(), b0.double(), b1.double(), round_h=torch.bfloat16)
    print(m, pol, gran, split, 'maxerr', (out.double()-e).abs().max().item(), flush=True)
