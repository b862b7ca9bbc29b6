/**
 * `make bench`: denit side by side with tini, dumb-init and catatonit, and with the "Deno
 * floor" (what the runtime costs by itself), interleaved in one run, medians over repeats,
 * each figure also as a ratio to tini. Writes bench/RESULTS.md and bench/chart.svg.
 *
 * Usage: run.ts PROBE DENO BUNDLE OUT_DIR [--quick]
 */

import { RUN_FLAGS } from "../src/runtime_flags.ts";
import { renderChart } from "./chart.ts";
import { type Figures, renderResults } from "./report.ts";

const [PROBE, DENO, BUNDLE, OUT] = Deno.args;
const QUICK = Deno.args.includes("--quick");
const HERE = new URL(".", import.meta.url).pathname;
const RUN = RUN_FLAGS;

/** Each supervisor's argv up to and including its "--" (not PID 1: subreaper where offered). */
const SUPERVISORS: Record<string, string[]> = {
  tini: ["tini", "-s", "--"],
  "dumb-init": ["dumb-init", "--"],
  catatonit: ["catatonit", "--"],
  denit: [DENO, ...RUN, BUNDLE, "-s", "--"],
};
/** The same as PID 1 of a PID namespace. */
const AS_PID1: Record<string, string[]> = {
  tini: ["tini", "--"],
  "dumb-init": ["dumb-init", "--"],
  catatonit: ["catatonit", "--"],
  denit: [DENO, ...RUN, BUNDLE, "--"],
};
const FLOOR_SPAWN = [DENO, ...RUN, `${HERE}floor_spawn.js`];
const FLOOR_EMPTY = [DENO, ...RUN, `${HERE}floor_empty.js`];
const FLOOR_FFI = [DENO, ...RUN, `${HERE}floor_ffi.js`];
const NAMES = Object.keys(SUPERVISORS);

function log(message: string): void {
  Deno.stderr.writeSync(new TextEncoder().encode(`bench: ${message}\n`));
}

function shuffled<T>(items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

function probe(args: string[]): Record<string, number> {
  const out = new Deno.Command(PROBE, { args, stdout: "piped", stderr: "inherit" }).outputSync();
  const line = new TextDecoder().decode(out.stdout).trim().split("\n").at(-1) ?? "";
  try {
    return JSON.parse(line);
  } catch {
    throw new Error(`probe ${args.join(" ")} printed "${line}"`);
  }
}

function startOverhead(repeats: number): Figures["start"] {
  log(`start overhead: ${repeats} rounds`);
  const runs: Record<string, number[]> = {
    alone: [],
    floorEmpty: [],
    floorSpawn: [],
    floorFfi: [],
  };
  for (const name of NAMES) runs[name] = [];
  const cases: Array<[string, string[]]> = [
    ["alone", ["/bin/true"]],
    ["floorEmpty", FLOOR_EMPTY],
    ["floorSpawn", [...FLOOR_SPAWN, "/bin/true"]],
    ["floorFfi", [...FLOOR_FFI, "/bin/true"]],
    ...NAMES.map((name): [string, string[]] => [name, [...SUPERVISORS[name], "/bin/true"]]),
  ];
  for (let round = 0; round < repeats; round++) {
    for (const [name, argv] of shuffled(cases)) runs[name].push(probe(["time", ...argv]).us);
  }
  const alone = median(runs.alone);
  const result: Figures["start"] = { alone, overheadUs: {} };
  for (const name of Object.keys(runs)) result.overheadUs[name] = median(runs[name]) - alone;
  return result;
}

function statusField(pid: number, field: string): number {
  const text = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
}

function childrenOf(pid: number): string {
  let all = "";
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    all += Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`);
  }
  return all.trim();
}

async function memory(repeats: number): Promise<Figures["memory"]> {
  log(`memory: ${repeats} rounds`);
  const cases: Array<[string, string[], boolean]> = [
    ["floorEmpty", [...FLOOR_EMPTY, "sleep"], false],
    ["floorSpawn", [...FLOOR_SPAWN, "sleep", "30"], true],
    ["floorFfi", [...FLOOR_FFI, "sleep", "30"], true],
    ...NAMES.map((
      name,
    ): [string, string[], boolean] => [name, [...SUPERVISORS[name], "sleep", "30"], true]),
  ];
  const rss: Record<string, number[]> = {};
  const hwm: Record<string, number[]> = {};
  for (let round = 0; round < repeats; round++) {
    for (const [name, argv, hasChild] of shuffled(cases)) {
      const child = new Deno.Command(argv[0], {
        args: argv.slice(1),
        stdout: "null",
        stderr: "null",
      }).spawn();
      const deadline = Date.now() + 10_000;
      // Sampled once the supervisor's child runs, and after a settle time for lazy start-up work.
      while (hasChild && childrenOf(child.pid) === "" && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      await new Promise((r) => setTimeout(r, 300));
      (rss[name] ??= []).push(statusField(child.pid, "VmRSS"));
      (hwm[name] ??= []).push(statusField(child.pid, "VmHWM"));
      child.kill("SIGTERM");
      await child.status;
    }
  }
  const result: Figures["memory"] = { rssKiB: {}, hwmKiB: {} };
  for (const name of Object.keys(rss)) {
    result.rssKiB[name] = median(rss[name]);
    result.hwmKiB[name] = median(hwm[name]);
  }
  return result;
}

function signals(count: number): Figures["signals"] {
  log(`signal forwarding: ${count} signals per supervisor`);
  const cases: Array<[string, string[]]> = [
    ["direct", ["--"]],
    ["floor", [DENO, ...RUN, `${HERE}floor_forward.js`, "--"]],
    ...NAMES.map((name): [string, string[]] => [name, SUPERVISORS[name]]),
  ];
  const result: Figures["signals"] = {};
  for (const [name, sup] of shuffled(cases)) {
    const r = probe(["siglat", String(count), ...sup]);
    result[name] = {
      medianUs: r.median_us,
      p99Us: r.p99_us,
      maxUs: r.max_us,
      lost: r.lost,
      count: r.count,
    };
  }
  return result;
}

function reaping(count: number, repeats: number, streamRate: number): Figures["reaping"] {
  log(`reaping: ${count} orphans at once, ${repeats} rounds; a stream of ${streamRate}/s`);
  const pidns = ["unshare", "--pid", "--fork", "--mount-proc"];
  const burst: Record<string, Array<Record<string, number>>> = {};
  for (let round = 0; round < repeats; round++) {
    for (const name of shuffled(NAMES)) {
      const argv = [...pidns, ...AS_PID1[name], PROBE, "orphans", "burst", String(count)];
      const out = new Deno.Command(argv[0], { args: argv.slice(1), stdout: "piped" }).outputSync();
      (burst[name] ??= []).push(JSON.parse(new TextDecoder().decode(out.stdout).trim()));
    }
  }
  const result: Figures["reaping"] = {};
  for (const name of NAMES) {
    const stream = (() => {
      const argv = [
        ...pidns,
        ...AS_PID1[name],
        PROBE,
        "orphans",
        "stream",
        String(streamRate),
        "5",
      ];
      const out = new Deno.Command(argv[0], { args: argv.slice(1), stdout: "piped" }).outputSync();
      return JSON.parse(new TextDecoder().decode(out.stdout).trim());
    })();
    result[name] = {
      perSecond: median(burst[name].map((r) => r.per_second)),
      peak: Math.max(...burst[name].map((r) => r.peak)),
      left: Math.max(...burst[name].map((r) => r.left)),
      streamPeakBacklog: stream.peak_backlog,
      streamLeft: stream.left,
    };
  }
  return result;
}

function exitPropagation(repeats: number): Figures["exit"] {
  log(`exit propagation: ${repeats} rounds`);
  const cases: Array<[string, string[]]> = [
    ["direct", ["--"]],
    ["floor", [DENO, ...RUN, `${HERE}floor_spawn.js`, "--"]],
    // The health server must not delay the exit: the same with it listening.
    ["denitHealth", [DENO, ...RUN, BUNDLE, "-s", "--health-addr", "127.0.0.1:0", "--"]],
    ...NAMES.map((name): [string, string[]] => [name, SUPERVISORS[name]]),
  ];
  const runs: Record<string, number[]> = {};
  for (let round = 0; round < repeats; round++) {
    for (const [name, sup] of shuffled(cases)) {
      (runs[name] ??= []).push(probe(["exitlat", ...sup]).us);
    }
  }
  const result: Figures["exit"] = {};
  for (const name of Object.keys(runs)) result[name] = median(runs[name]);
  return result;
}

function wrk(url: string, seconds: number): { rps: number; p50Ms: number; p99Ms: number } {
  const out = new Deno.Command("wrk", {
    args: ["-t2", "-c50", `-d${seconds}s`, "--latency", url],
    stdout: "piped",
  }).outputSync();
  const text = new TextDecoder().decode(out.stdout);
  const ms = (label: string) => {
    const m = new RegExp(`^\\s+${label}\\s+([\\d.]+)(us|ms|s)`, "m").exec(text);
    if (m === null) return NaN;
    return Number(m[1]) * (m[2] === "us" ? 0.001 : m[2] === "s" ? 1000 : 1);
  };
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1]),
    p50Ms: ms("50%"),
    p99Ms: ms("99%"),
  };
}

async function waitListening(port: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      (await Deno.connect({ hostname: "127.0.0.1", port })).close();
      return;
    } catch {
      if (Date.now() > deadline) throw new Error(`nothing listens on ${port}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

async function health(seconds: number): Promise<Figures["health"]> {
  log(`health: wrk -c50 for ${seconds}s against the floor, denit, and denit while reaping`);
  const result: Figures["health"] = {};
  // 1,000 orphans per second for as long as wrk runs, and a little longer.
  const orphanStream = [PROBE, "orphans", "stream", "1000", String(seconds + 3)];
  const servers: Array<[string, string[]]> = [
    ["floor", [DENO, ...RUN, `${HERE}floor_serve.js`, "17631"]],
    ["denit", [
      DENO,
      ...RUN,
      BUNDLE,
      "-s",
      "--health-addr",
      "127.0.0.1:17632",
      "--",
      "sleep",
      "600",
    ]],
    ["denitReaping", [
      "unshare",
      "--pid",
      "--fork",
      "--mount-proc",
      "--kill-child",
      DENO,
      ...RUN,
      BUNDLE,
      "--health-addr",
      "127.0.0.1:17633",
      "--",
      ...orphanStream,
    ]],
  ];
  // The floor again under the same orphan load, made beside it by tini as PID 1: what the
  // load costs any server on these two cores, as against what denit's reaping costs.
  servers.push(["floorReaping", [DENO, ...RUN, `${HERE}floor_serve.js`, "17634"]]);
  for (const [name, argv] of servers) {
    const port = Number(/1763\d/.exec(argv.join(" "))?.[0]);
    const load = name !== "floorReaping" ? null : new Deno.Command("unshare", {
      args: ["--pid", "--fork", "--mount-proc", "--kill-child", "tini", "--", ...orphanStream],
      stdout: "null",
    }).spawn();
    const child = new Deno.Command(argv[0], {
      args: argv.slice(1),
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const stdout = new Response(child.stdout).text();
    try {
      await waitListening(port);
      const path = name.startsWith("floor") ? "/" : "/healthz";
      result[name] = { ...wrk(`http://127.0.0.1:${port}${path}`, seconds), zombiesLeft: null };
    } finally {
      if (name !== "denitReaping") child.kill("SIGTERM");
    }
    await child.status;
    await load?.status;
    if (name === "denitReaping") result[name].zombiesLeft = JSON.parse((await stdout).trim()).left;
  }
  return result;
}

function sh(command: string): void {
  const out = new Deno.Command("sh", { args: ["-c", command], stderr: "inherit" }).outputSync();
  if (!out.success) throw new Error(`failed: ${command}`);
}

function copy(repeats: number): Figures["copy"] {
  const dir = `${OUT}/tmpfs`;
  log(`copy: a 512 MiB file and 20,000 files of 4 KiB on a tmpfs, ${repeats} rounds`);
  Deno.mkdirSync(dir, { recursive: true });
  // tmpfs: the disk of these machines varies tenfold from run to run; memory does not.
  sh(`mountpoint -q ${dir} || mount -t tmpfs -o size=3g tmpfs ${dir}`);
  try {
    sh(`mkdir -p ${dir}/big ${dir}/small && head -c 512M /dev/urandom > ${dir}/big/file`);
    sh(
      `cd ${dir}/small && for a in $(seq 20); do for b in $(seq 10); do mkdir -p d$a/e$b; done; done`,
    );
    const blob = crypto.getRandomValues(new Uint8Array(4096));
    for (let a = 1; a <= 20; a++) {
      for (let b = 1; b <= 10; b++) {
        for (let c = 0; c < 100; c++) Deno.writeFileSync(`${dir}/small/d${a}/e${b}/f${c}`, blob);
      }
    }
    const result: Figures["copy"] = {};
    const argvFor = (tool: string, fixture: string) =>
      tool === "cp"
        ? ["cp", "-a", `${dir}/${fixture}`, `${dir}/out`]
        : [DENO, ...RUN, BUNDLE, "copy", `${dir}/${fixture}/.`, `${dir}/out`];
    for (const fixture of ["big", "small"]) {
      // One untimed round each first: the first copies after the fixture was written run at
      // half speed for cp and denit alike (page allocation on the fresh tmpfs).
      for (const tool of ["cp", "denit"]) {
        sh(`rm -rf ${dir}/out`);
        probe(["time", ...argvFor(tool, fixture)]);
      }
      const runs: Record<string, number[]> = { cp: [], denit: [] };
      for (let round = 0; round < repeats; round++) {
        for (const tool of shuffled(["cp", "denit"])) {
          sh(`rm -rf ${dir}/out`);
          runs[tool].push(probe(["time", ...argvFor(tool, fixture)]).us / 1000);
        }
      }
      result[fixture] = { cpMs: median(runs.cp), denitMs: median(runs.denit) };
    }
    return result;
  } finally {
    sh(`umount ${dir} && rmdir ${dir}`);
  }
}

function machine(): Figures["machine"] {
  const cpu = /^model name\s*:\s*(.*)$/m.exec(Deno.readTextFileSync("/proc/cpuinfo"))?.[1] ?? "?";
  const git = new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], stdout: "piped" })
    .outputSync();
  const version = (argv: string[]) => {
    const out = new Deno.Command(argv[0], { args: argv.slice(1), stdout: "piped", stderr: "piped" })
      .outputSync();
    return new TextDecoder().decode(out.stdout).trim().split("\n")[0] ||
      new TextDecoder().decode(out.stderr).trim().split("\n")[0];
  };
  return {
    date: new Date().toISOString().slice(0, 16).replace("T", " ") + " UTC",
    commit: new TextDecoder().decode(git.stdout).trim(),
    cpu: `${cpu}, ${navigator.hardwareConcurrency} cores`,
    kernel: Deno.osRelease(),
    memoryGiB: Math.round(Deno.systemMemoryInfo().total / (1 << 30)),
    versions: {
      tini: version(["tini", "--version"]),
      "dumb-init": version(["dumb-init", "--version"]),
      catatonit: version(["catatonit", "--version"]),
      deno: Deno.version.deno,
    },
  };
}

if (Deno.args.includes("--render")) {
  // Re-renders RESULTS.md and the chart from the last run's figures (after editing NOTES.md).
  const last: Figures = JSON.parse(Deno.readTextFileSync(`${OUT}/results.json`));
  Deno.writeTextFileSync(`${HERE}RESULTS.md`, renderResults(last));
  Deno.writeTextFileSync(`${HERE}chart.svg`, renderChart(last));
  Deno.exit(0);
}

const started = performance.now();
const figures: Figures = {
  machine: machine(),
  quick: QUICK,
  start: startOverhead(QUICK ? 5 : 25),
  memory: await memory(QUICK ? 1 : 5),
  signals: signals(QUICK ? 200 : 1000),
  reaping: reaping(QUICK ? 2000 : 20000, QUICK ? 1 : 5, 2000),
  exit: exitPropagation(QUICK ? 5 : 30),
  health: await health(QUICK ? 2 : 8),
  copy: copy(QUICK ? 1 : 5),
  seconds: 0,
};
figures.seconds = Math.round((performance.now() - started) / 1000);
Deno.writeTextFileSync(`${OUT}/results.json`, JSON.stringify(figures, null, 2));
Deno.writeTextFileSync(`${HERE}RESULTS.md`, renderResults(figures));
Deno.writeTextFileSync(`${HERE}chart.svg`, renderChart(figures));
log(`done in ${figures.seconds} s: bench/RESULTS.md, bench/chart.svg`);
