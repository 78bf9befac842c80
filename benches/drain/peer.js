// The peer phase of the drain benchmark: graphile-worker drains N jobs
// through the same HTTP handler as Feed, set up as its users would for
// speed: jobs enqueued with `addJobs` in chunks, the throughput settings of
// its performance page (a local queue, batched completion and failure, a
// pool one larger than the concurrency), and each POST made with undici's
// `Pool` over `concurrency` keep-alive connections (Node's global `fetch`
// costs several times the CPU per request).
//
// node peer.js <postgres url> <handler url> <jobs> <concurrency>
// Prints one JSON line: {"jobs", "enqueue_s", "drain_s", "jobs_per_s",
// "cpu_s", "busy_share", "settings"}.
"use strict";
const fs = require("fs");
const { run, makeWorkerUtils } = require("graphile-worker");
const { Pool } = require("pg");
const undici = require("undici");

const [connectionString, handlerUrl, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const CHUNK = 10000;

// Busy and total ticks of all CPUs, from /proc/stat.
function ticks() {
  const f = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3] - f[4], total };
}

const settings = {
  concurrentJobs: concurrency,
  maxPoolSize: concurrency + 1,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
  pollInterval: 1000,
  http: `undici ${require("undici/package.json").version} Pool, ${concurrency} connections`,
  enqueue: `addJobs, ${CHUNK} per call`,
};

async function main() {
  const utils = await makeWorkerUtils({ connectionString });
  await utils.migrate();
  const e0 = performance.now();
  for (let from = 0; from < jobs; from += CHUNK) {
    const specs = [];
    for (let n = from; n < Math.min(jobs, from + CHUNK); n++) {
      specs.push({ identifier: "post", payload: { n } });
    }
    await utils.addJobs(specs);
  }
  const enqueue = (performance.now() - e0) / 1000;
  await utils.release();

  const url = new URL(handlerUrl);
  const http = new undici.Pool(url.origin, { connections: concurrency, pipelining: 1 });
  let started = null;
  let cpu0 = null;
  let t0 = null;
  let done = 0;
  const runner = await run({
    connectionString,
    noHandleSignals: true,
    preset: {
      worker: {
        concurrentJobs: settings.concurrentJobs,
        maxPoolSize: settings.maxPoolSize,
        pollInterval: settings.pollInterval,
        localQueue: settings.localQueue,
        completeJobBatchDelay: settings.completeJobBatchDelay,
        failJobBatchDelay: settings.failJobBatchDelay,
      },
    },
    taskList: {
      post: async (payload, helpers) => {
        if (started === null) {
          started = performance.now();
          cpu0 = process.cpuUsage();
          t0 = ticks();
        }
        const r = await http.request({
          path: url.pathname,
          method: "POST",
          headers: { "content-type": "application/json", "feed-item-id": String(helpers.job.id) },
          body: JSON.stringify(payload),
        });
        await r.body.arrayBuffer();
        if (r.statusCode >= 300) throw new Error(`handler answered ${r.statusCode}`);
        done++;
      },
    },
  });
  // Every handler call has returned: then wait for the batched completions
  // to reach the database, looking no more often than Feed's drain is
  // polled (20 ms at least, ten times what the last look took).
  const pool = new Pool({ connectionString, max: 1 });
  while (done < jobs) await new Promise((r) => setTimeout(r, 5));
  for (;;) {
    const t = performance.now();
    const { rows } = await pool.query("SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS left");
    if (!rows[0].left) break;
    await new Promise((r) => setTimeout(r, Math.max(20, (performance.now() - t) * 10)));
  }
  const drain = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const t1 = ticks();
  await runner.stop();
  await pool.end();
  await http.close();
  console.log(JSON.stringify({
    jobs,
    enqueue_s: enqueue,
    drain_s: drain,
    jobs_per_s: jobs / drain,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    busy_share: (t1.busy - t0.busy) / (t1.total - t0.total),
    settings,
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
