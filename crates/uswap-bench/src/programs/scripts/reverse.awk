# Holds every input line, then prints them in reverse order.
{ a[NR] = $0 }
END { for (i = NR; i > 0; i--) print a[i] }
