# Builds a hash of N entries, reads every one back, prints its size and a checksum.
use strict;
use warnings;
my $n = shift;
my %h;
for my $i (1 .. $n) {
    $h{"key$i"} = "val" . ($i * 7919 % 1000003) . ("y" x ($i % 17));
}
my ($len, $sum) = (0, 0);
for my $i (1 .. $n) {
    my $v = $h{"key$i"};
    $len += length($v);
    $sum = ($sum * 31 + ord(substr($v, -1))) % 1000000007;
}
print scalar(keys %h), " $len $sum\n";
