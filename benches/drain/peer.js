// The peer phase of the drain benchmark: graphile-worker drains N jobs
// through the same HTTP handler as Feed, with its documented throughput
// settings (a local queue, batched completion), one worker.
//
// node peer.js <postgres url> <handler url> <jobs> <concurrency>
// Prints one JSON line: {"jobs", "drain_s", "jobs_per_s", "cpu_s", "busy_share"}.
"use strict";
const fs = require("fs");
const { run, makeWorkerUtils } = require("graphile-worker");
const { Pool } = require("pg");

const [connectionString, handlerUrl, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);

// Busy and total ticks of all CPUs, from /proc/stat.
function ticks() {
  const f = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - f[3] - f[4], total };
}

async function main() {
  const utils = await makeWorkerUtils({ connectionString });
  await utils.migrate();
  await utils.release();
  const pool = new Pool({ connectionString, max: 2 });
  for (let from = 1; from <= jobs; from += 10000) {
    const to = Math.min(jobs, from + 9999);
    await pool.query(
      "SELECT graphile_worker.add_job('post', json_build_object('n', g)) FROM generate_series($1::int, $2::int) g",
      [from, to],
    );
  }
  let started = null;
  let cpu0 = null;
  let t0 = null;
  const runner = await run({
    connectionString,
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    preset: {
      worker: {
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
    taskList: {
      post: async (payload, helpers) => {
        if (started === null) {
          started = performance.now();
          cpu0 = process.cpuUsage();
          t0 = ticks();
        }
        const r = await fetch(handlerUrl, {
          method: "POST",
          headers: { "content-type": "application/json", "feed-item-id": String(helpers.job.id) },
          body: JSON.stringify(payload),
        });
        await r.arrayBuffer();
        if (!r.ok) throw new Error(`handler answered ${r.status}`);
      },
    },
  });
  for (;;) {
    const { rows } = await pool.query("SELECT COUNT(*)::int AS n FROM graphile_worker.jobs");
    if (started !== null && rows[0].n === 0) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const drain = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const t1 = ticks();
  await runner.stop();
  await pool.end();
  console.log(JSON.stringify({
    jobs,
    drain_s: drain,
    jobs_per_s: jobs / drain,
    cpu_s: (cpu.user + cpu.system) / 1e6,
    busy_share: (t1.busy - t0.busy) / (t1.total - t0.total),
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
