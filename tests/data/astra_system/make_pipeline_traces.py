# A small pipeline: each rank receives from its left neighbour (except rank 0), computes,
# sends to its right neighbour (except the last), twice (two micro-batches), then all ranks
# all-reduce their gradients.
import sys, os
sys.path.insert(0,'/work/astra_build/astra-sim/extern/graph_frontend/chakra/schema/protobuf')
os.environ['PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION']='python'
import et_def_pb2 as pb
from google.protobuf.internal.encoder import _VarintBytes
out=sys.argv[1]; n=int(sys.argv[2]); os.makedirs(out,exist_ok=True)
def attr(nd,name,**kw):
    a=nd.attr.add(); a.name=name
    for k,v in kw.items(): setattr(a,k,v)
for r in range(n):
    nodes=[]; nid=0; last=None
    def node(name,typ,deps,**attrs):
        global nid
        nd=pb.Node(); nd.id=nid; nd.name=name; nd.type=typ
        for d in deps:
            if d is not None: nd.data_deps.append(d)
        attr(nd,'is_cpu_op',bool_val=False)
        for k,(field,v) in attrs.items(): attr(nd,k,**{field:v})
        nodes.append(nd); nid+=1; return nd.id
    for mb in range(2):
        if r>0: last=node(f'recv{mb}',pb.COMM_RECV_NODE,[last],comm_src=('int32_val',r-1),comm_dst=('int32_val',r),comm_size=('int64_val',262144),comm_tag=('int32_val',mb))
        nd=node(f'fwd{mb}',pb.COMP_NODE,[last]); 
        nodes[-1].duration_micros=3+r
        last=nd
        if r<n-1: last=node(f'send{mb}',pb.COMM_SEND_NODE,[last],comm_src=('int32_val',r),comm_dst=('int32_val',r+1),comm_size=('int64_val',262144),comm_tag=('int32_val',mb))
    g=node('grad',pb.COMP_NODE,[last]); nodes[-1].duration_micros=7
    node('allreduce',pb.COMM_COLL_NODE,[g],comm_type=('int64_val',pb.ALL_REDUCE),comm_size=('int64_val',1<<20))
    node('tail',pb.COMP_NODE,[g]); nodes[-1].duration_micros=50
    with open(f'{out}/pipeline.{r}.et','wb') as f:
        gm=pb.GlobalMetadata(version='0.0.4'); m=gm.SerializeToString(); f.write(_VarintBytes(len(m))+m)
        for nd in nodes:
            m=nd.SerializeToString(); f.write(_VarintBytes(len(m))+m)
