const { Worker, isMainThread, parentPort, workerData } = require('worker_threads');
const crypto = require('crypto');
if (isMainThread) {
  const arr = []; for (let i = 0; i < 1500000; i++) arr.push({ k: 'key' + i, v: i * 7 });
  let done = 0; const res = [];
  for (let w = 0; w < 3; w++) {
    const wk = new Worker(__filename, { workerData: w });
    wk.on('message', m => { res[w] = m; if (++done === 3) {
      let s = 0; for (const o of arr) s = (s + o.v) % 1000003;
      console.log(s, crypto.createHash('sha256').update(res.join(',')).digest('hex')); } });
  }
} else {
  const m = new Map(); for (let i = 0; i < 700000; i++) m.set('w' + workerData + ':' + i, 'x'.repeat(20) + i);
  let h = crypto.createHash('sha256'); for (const [k, v] of m) h.update(k + v);
  parentPort.postMessage(h.digest('hex'));
}
