import sys,os
pid=int(sys.argv[1])
vmas=[]
for l in open(f'/proc/{pid}/maps'):
    a,b=l.split()[0].split('-'); a=int(a,16); b=int(b,16)
    if b-a > (1<<39): vmas.append((a,b))
fd=os.open(f'/proc/{pid}/pagemap',os.O_RDONLY)
a,b=vmas[0]
print(f"VMA {a:x}-{b:x} {(b-a)>>30} GiB")
off=a; G=1<<30
while off<b:
    n=min(G,b-off)//4096
    buf=os.pread(fd,n*8,(off//4096)*8)
    hb=buf[7::8]
    c=len(hb)-hb.count(0)
    if c:
        # per-MiB detail
        det=[]
        for i in range(0,n,256):
            h=hb[i:i+256]; k=len(h)-h.count(0)
            if k: det.append((i//256,k))
        print(f"  +{(off-a)>>30} GiB: {c*4/1024:.1f} MiB in {len(det)} MiB-chunks, MiB offsets {det[0][0]}..{det[-1][0]}")
    off+=G
