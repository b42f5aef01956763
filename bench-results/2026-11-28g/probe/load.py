import socket, random, sys
N=int(sys.argv[1]); port=int(sys.argv[2])
W=[b"lorem ",b"ipsum ",b"dolor ",b"sit ",b"amet ",b"redis ",b"swap ",b"page "]
s=socket.create_connection(("127.0.0.1",port))
def val(i):
    r=random.Random(i); v=b"v%d:"%i
    while len(v)<1000:
        x=r.getrandbits(64); v+=W[x&7]+str(x>>40).encode()
    return v[:1000]
B=1000
for i0 in range(0,N,B):
    out=[]
    for i in range(i0,min(N,i0+B)):
        k=b"key:%012d"%i; v=val(i)
        out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"%(len(k),k,len(v),v))
    s.sendall(b"".join(out))
    need=min(N,i0+B)-i0; got=b""
    while got.count(b"\r\n")<need: got+=s.recv(65536)
print("loaded",N)
