<?php
$n = intval($argv[1] ?? 2000000);
$a = [];
for ($i = 0; $i < $n; $i++) { $a["k$i"] = str_repeat("v", $i % 50) . $i; }
$s = 0; foreach ($a as $v) { $s += strlen($v); }
ksort($a, SORT_STRING);
echo count($a), " ", $s, " ", implode(",", array_slice(array_keys($a), 0, 3)), "\n";
