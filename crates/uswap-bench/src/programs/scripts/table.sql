.bail on
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v INTEGER, pad TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < @ROWS@)
INSERT INTO t SELECT i, printf('key%08d', (i * 7919) % @ROWS@), (i * 31337) % 1000, printf('%-120d', i * 13) FROM c;
CREATE INDEX tk ON t(k);
SELECT count(*), sum(v), min(k), max(k) FROM t;
SELECT v % 10, count(*), sum(length(pad)) FROM t GROUP BY 1 ORDER BY 1;
SELECT count(*), sum(id) FROM t WHERE k BETWEEN 'key00100000' AND 'key00200000';
SELECT k, v FROM t ORDER BY v DESC, k LIMIT 5;
