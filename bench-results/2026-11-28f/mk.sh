#!/bin/bash
# mk.sh DIR: generate 60 C files and a Makefile in DIR
mkdir -p $1 && cd $1
for i in $(seq 24); do
  { echo "#include <stdio.h>"; for j in $(seq 300); do echo "int f${i}_$j(int x) { int a[64]; for (int k = 0; k < 64; k++) a[k] = x * k + $j; int s = 0; for (int k = 0; k < 64; k++) s += a[k] ^ (s >> 3); return s; }"; done; echo "int g$i(void) { int s = 0; $(for j in $(seq 300); do printf 's += f%d_%d(%d); ' $i $j $j; done) return s; }"; } > f$i.c
done
{ echo "#include <stdio.h>"; for i in $(seq 24); do echo "int g$i(void);"; done; echo "int main(void) { long s = 0; $(for i in $(seq 24); do printf 's += g%d(); ' $i; done) printf(\"%ld\\n\", s); return 0; }"; } > main.c
cat > Makefile <<'EOM'
SRC := $(wildcard f*.c) main.c
OBJ := $(SRC:.c=.o)
prog: $(OBJ)
	$(CC) -o $@ $(OBJ)
%.o: %.c
	$(CC) -O2 -c $< -o $@
clean:
	rm -f *.o prog
EOM
