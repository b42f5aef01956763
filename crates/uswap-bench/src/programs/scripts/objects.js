// Builds N small objects in an array, then prints a sum over all of them and a SHA-256 of the
// JSON of every 97th.
const crypto = require('crypto');
const n = parseInt(process.argv[2], 10);
const a = new Array(n);
for (let i = 0; i < n; i++) {
  a[i] = { id: i, name: 'item-' + i, v: (i * 7919) % 1000003, tags: [i % 7, i % 11] };
}
let sum = 0;
for (const o of a) sum = (sum + o.v * (o.tags[0] + 1) + o.name.length) % 1000000007;
const h = crypto.createHash('sha256');
for (let i = 0; i < n; i += 97) h.update(JSON.stringify(a[i]));
console.log(n, sum, h.digest('hex'));
